"""Operator-view FLOP counting: `scan()` and `measure_flops()`."""

from __future__ import annotations

import contextlib
import inspect
import json
import warnings
from collections.abc import Mapping as _MappingABC
from typing import Any, Callable, Literal, Mapping, Optional

import torch

from torchscan import _aoti, _checkpoint, _compiled
from torchscan import distributed as _distributed
from torchscan._layers import _native_reports
from torchscan._library import Session
from torchscan._modules import ModuleLabels

__all__ = ["scan", "measure_flops", "tls_mode_included", "FlopScan"]


def tls_mode_included() -> bool:
    """Whether this thread's dispatch TLS includes TorchScan's mode key."""
    return bool(Session.mode_key_included())


def _op_name(key: Any) -> str:
    if isinstance(key, torch._ops.OpOverloadPacket):
        return key._qualified_op_name
    if isinstance(key, torch._ops.OpOverload):
        raise TypeError(
            f"torchscan: custom_mapping keys are operator packets like torch.ops.aten.mm, "
            f"not overloads like {key}; use {key.overloadpacket}")
    raise TypeError(
        f"torchscan: custom_mapping keys are operator packets like torch.ops.aten.mm; got {key!r}")


class _TensorMeta:
    """What a `_get_raw` caller formula receives instead of a tensor."""

    __slots__ = ("shape", "dtype", "device")

    def __init__(self, shape, dtype, device):
        self.shape = shape
        self.dtype = dtype
        self.device = device

    def size(self, dim: Optional[int] = None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"TensorMeta(shape={tuple(self.shape)}, dtype={self.dtype}, device={self.device})"


def _decode(value, raw: bool):
    if isinstance(value, list):
        return [_decode(v, raw) for v in value]
    if isinstance(value, dict):
        if "__tensor__" in value:
            t = value["__tensor__"]
            shape = None if t["shape"] is None else torch.Size(t["shape"])
            if not raw:
                return shape
            return _TensorMeta(shape, getattr(torch, t["dtype"], None), torch.device(t["device"]))
        return None  # "__other__": not representable as a value
    return value


class FlopScan:
    """One scan of the calling thread (threads="all": of every thread that
    runs ATen work while it is active). Use as a context manager:

    >>> with torchscan.scan() as s:
    ...     model(x)
    >>> s.report()["total"]["status"]
    """

    def __init__(self, custom_mapping: Optional[Mapping[Any, Callable]] = None, *, modules: bool = False,
                 scope: str = "workload", memory: bool = False, trace: bool = False, streaming: bool = False,
                 _fold_every: int = 4096, threads: str = "current", _record_owned_children: Optional[bool] = None,
                 _module_scopes: Optional[bool] = None):
        if not isinstance(modules, bool):
            raise TypeError(f"torchscan: modules must be True or False, got {type(modules).__name__}")
        if not isinstance(memory, bool):
            raise TypeError(f"torchscan: memory must be True or False, got {type(memory).__name__}")
        if not isinstance(trace, bool):
            raise TypeError(f"torchscan: trace must be True or False, got {type(trace).__name__}")
        if not isinstance(threads, str) or threads not in ("current", "all"):
            raise ValueError(f'torchscan: threads must be "current" or "all", got {threads!r}')
        if threads == "all" and memory:
            # The allocator reports are per thread (the profiler's slot).
            raise ValueError('torchscan: memory=True covers scans of the current thread; use threads="current"')
        if not isinstance(streaming, bool):
            raise TypeError(f"torchscan: streaming must be True or False, got {type(streaming).__name__}")
        if streaming and (memory or trace or custom_mapping):
            what = "memory=True" if memory else "trace=True" if trace else "custom_mapping"
            raise ValueError(f"torchscan: a streaming scan keeps sums, not calls, so it cannot take {what}; "
                             "use streaming=False for it")
        self._formulas = {}
        if custom_mapping is not None and not isinstance(custom_mapping, _MappingABC):
            raise TypeError("torchscan: custom_mapping must be a dict {torch.ops.aten.<op>: formula}, "
                            f"got {type(custom_mapping).__name__}")
        for key, fn in (custom_mapping or {}).items():
            if not callable(fn):
                raise TypeError(f"torchscan: custom_mapping[{key}] must be callable, got {type(fn).__name__}")
            self._formulas[_op_name(key)] = fn
        # See Note [Owned children] (torchscan_dispatch/core/op_catalog.cc): the
        # calls inside a call that owns its subtree are recorded only for a
        # trace, memory or caller formulas; the coverage audit asks for all.
        record = bool(trace or memory or self._formulas) if _record_owned_children is None else _record_owned_children
        # A streaming scan of the public API never takes module scopes (only
        # crawl_module and the roofline push them, on scans of their own), so
        # its folds skip the receptive-field flow (ScanOptions::module_scopes).
        scopes = not streaming if _module_scopes is None else bool(_module_scopes)
        if threads == "all":
            self._session = Session.all_threads(scope, trace, streaming, int(_fold_every), record, scopes)
        else:
            self._session = Session(scope, memory, trace, streaming, int(_fold_every), record, scopes)
        for name in self._formulas:
            self._session.defer_formula(name)
        self._report: Optional[dict] = None
        self._stopped = False  # this object's stop() returned: a session scans once, so it is over
        self._modules = ModuleLabels(self._session, all_threads=threads == "all") if modules else None

    def _active(self) -> bool:
        # Asked only until this object stopped the scan (a library call costs
        # microseconds, and a crawl asks four times).
        return not self._stopped and self._session.active()

    def __enter__(self) -> "FlopScan":
        _compiled.prepare()
        _checkpoint.prepare()
        try:
            # Inside the try: an interrupt (Ctrl-C) the moment start() returns
            # still stops the scan.
            self._session.start()
            if self._modules is not None:
                self._modules.install()
        except BaseException:  # Ctrl-C included: leave no hook and no TLS bit behind
            if self._active():
                self._close(failing=True)
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        self._close(failing=exc_type is not None)
        return False  # exceptions propagate unchanged

    def _run(self, fn: Callable, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        """fn(*args, **kwargs) inside the scan, as `with self:` does, except
        that the scan stops (and its hooks go) even when an interrupt
        (Ctrl-C) lands in the stop itself, where `with` would leave it
        running: the handler around it stops it again."""
        ok = False
        try:
            try:
                self.__enter__()  # inside the try: nothing is left running if it is interrupted
                result = fn(*args, **(kwargs or {}))
                ok = True
            finally:
                self._cleanup(failing=not ok)
        except BaseException:
            self._cleanup()
            raise
        return result

    def _cleanup(self, failing: bool = True) -> None:
        """Removes the module hooks and stops the scan if it still runs;
        idempotent. An error stopping it is raised only when not failing."""
        try:
            if self._modules is not None:
                self._modules.remove()
        finally:
            if self._active():
                self._close(failing)

    def _close(self, failing: bool) -> None:
        # The scan stops even when removing the hooks is interrupted.
        try:
            if self._modules is not None:
                self._modules.remove()
        finally:
            try:
                self._session.stop()
                self._stopped = True
            except RuntimeError as e:
                if not failing:
                    raise
                # Never replace the workload's own exception with ours.
                warnings.warn(f"torchscan: could not stop the scan cleanly: {e}", RuntimeWarning)

    def report(self) -> dict:
        """The schema-v1 FlopReport, once the scan has stopped."""
        if self._active():
            raise RuntimeError("torchscan: the report is available once the scan has stopped")
        if self._report is None:
            if self._formulas:
                self._resolve_caller_formulas()
            # From the library's pickle stream where it can (the JSON text's
            # objects without the text), else from the text.
            native = _native_reports(self._session.native_handle(), 1)
            report = native[0] if native is not None else json.loads(self._session.flop_report())
            # In a torch.distributed job: the rank's context and its collectives' bytes.
            _distributed.add_to_report(report, self._session)
            self._report = report
        return self._report

    def _both_reports(self, handle: int = 0):
        """(report(), module_report()) of the stopped scan; both loaded from
        one pickle stream of the library where its native handle allows
        (crawl_module's path: no JSON text written and read again)."""
        if self._report is None and handle and not self._formulas and not self._active():
            both = _native_reports(handle, 3)
            if both is not None:
                report, module = both
                _distributed.add_to_report(report, self._session)
                self._report = report
                return report, module
        return self.report(), self.module_report()

    @contextlib.contextmanager
    def request(self, request_id: str):
        """Tags the calling thread's calls made inside the `with` block as one
        request: the scan report's `requests` give its totals, its layer
        rows carry its id, and a trace links its slices. Requests do not nest."""
        if not isinstance(request_id, str) or not request_id:
            raise TypeError(f"torchscan: a request id must be a non-empty string, got {request_id!r}")
        self._session.begin_request(request_id)
        try:
            yield self
        finally:
            self._session.end_request()

    def held_calls(self) -> int:
        """Calls the scan holds in memory now: all it recorded, less those a
        streaming scan (scan(streaming=True)) has folded into its sums."""
        return self._session.held_calls()

    def scan_report(self) -> dict:
        """Everything the scan measured in one document (kind
        torchscan_scan_report): both views, the layers, the collectives
        (communication) and the requests, once the scan has stopped."""
        if self._active():
            raise RuntimeError("torchscan: the report is available once the scan has stopped")
        return json.loads(self._session.scan_report())

    def module_report(self) -> dict:
        """The module view of the same calls: module_flops, macs and dmas
        (TorchScan's module conventions), once the scan has stopped."""
        if self._active():
            raise RuntimeError("torchscan: the report is available once the scan has stopped")
        return json.loads(self._session.module_report())

    def memory_report(self) -> dict:
        """Allocator memory of the scan (scan(memory=True)), once it has
        stopped: totals peak_memory, allocated_bytes (alive when it stopped)
        and total_allocated_bytes, in bytes, and by_operator: the blocks
        allocated while each top-level operator call ran (the operator the
        program called), split into those that outlived the call
        (allocated_bytes) and those freed before it returned (temporary_bytes)."""
        if self._active():
            raise RuntimeError("torchscan: the report is available once the scan has stopped")
        return json.loads(self._session.memory_report())

    def trace(self) -> dict:
        """The scan as a Chrome / Perfetto trace (scan(trace=True)), once it
        has stopped: {"traceEvents": [...]} with module and operator calls as
        nested slices, one track per thread; json.dump it and open it in
        ui.perfetto.dev or chrome://tracing."""
        if self._active():
            raise RuntimeError("torchscan: the trace is available once the scan has stopped")
        return json.loads(self._session.trace())

    def _resolve_caller_formulas(self) -> None:
        import math
        import operator

        # Runs once the scan has stopped, so a bad value raises with the scan
        # already ended cleanly.
        def flop_count(result, op: str, fn: Callable) -> int:
            """A formula's value as an exact int: an int (not a bool), or a
            value that is exactly an integer (3.0, numpy ints); 0 <= n < 2**128."""
            where = (f"torchscan: the caller formula {getattr(fn, '__qualname__', repr(fn))} for {op} returned "
                     f"{result!r}")
            if result is None or isinstance(result, (bool, str, bytes)):
                raise TypeError(f"{where} ({type(result).__name__}); a formula must return a non-negative "
                                "integer FLOP count")
            try:
                n = operator.index(result)  # int, numpy / torch integers: exact
            except TypeError:
                try:
                    f = float(result)
                except (TypeError, ValueError):
                    raise TypeError(f"{where} ({type(result).__name__}); a formula must return a non-negative "
                                    "integer FLOP count") from None
                if not math.isfinite(f) or not f.is_integer():
                    raise ValueError(f"{where}, which is not a finite whole number; a formula must return a "
                                     "non-negative integer FLOP count") from None
                n = int(f)
            if n < 0:
                raise ValueError(f"{where}; FLOP counts are non-negative")
            if n >= 2**128:
                raise ValueError(f"{where}, which exceeds 2**128 - 1, the largest count TorchScan holds exactly")
            return n

        values = {}
        for call in json.loads(self._session.deferred_calls()):
            fn = self._lookup(call["op"])
            raw = getattr(fn, "_get_raw", False)
            args = [_decode(a, raw) for a in call["args"]]
            kwargs = {k: _decode(v, raw) for k, v in call["kwargs"].items()}
            out = _decode(call["out"], raw)
            # FlopCounterMode's calling convention: shapes for tensors, the
            # output as out_shape (or out_val for raw formulas).
            try:
                result = fn(*args, **kwargs, out_val=out) if raw else fn(*args, out_shape=out, **kwargs)
            except Exception as e:
                # The caller's exception, unchanged, with a note saying where it
                # came from (notes exist from Python 3.11; on 3.10 it goes bare).
                if hasattr(e, "add_note"):
                    e.add_note(f"torchscan: raised by the caller formula {getattr(fn, '__qualname__', repr(fn))} "
                               f"(custom_mapping) for {call['op']}")
                raise
            # A decimal string: counts past 2**64 - 1 reach C++ exactly.
            values[str(call["index"])] = str(flop_count(result, call["op"], fn))
        self._session.set_deferred_results(json.dumps(values))

    def _lookup(self, packet: str) -> Callable:
        name = packet.replace(".", "::", 1)
        if name in self._formulas:
            return self._formulas[name]
        return self._formulas[name[:-1]]  # in-place variant shares the formula


def scan(custom_mapping: Optional[Mapping[Any, Callable]] = None, *, modules: bool = False,
         memory: bool = False, trace: bool = False, streaming: bool = False,
         threads: str = "current") -> FlopScan:
    """Scan the calling thread for the duration of a `with` block. memory:
    also record the allocator's reports (FlopScan.memory_report); trace: also
    time every call (FlopScan.trace). streaming: fold calls into the reports'
    sums whenever nothing is running, so memory stays flat over a long
    workload (a training loop); the reports are the same. threads="all":
    every thread that runs ATen work while the scan is active, each joining
    on its first operator (one such scan at a time; memory=True is refused)."""
    return FlopScan(custom_mapping, modules=modules, memory=memory, trace=trace, streaming=streaming,
                    threads=threads)


def measure_flops(workload: Callable[[], Any], *, custom_mapping: Optional[Mapping[Any, Callable]] = None,
                  modules: bool = False) -> dict:
    """Run `workload()` once and return its operator-view FlopReport.

    custom_mapping: FlopCounterMode-style formulas ({torch.ops.aten.foo: fn},
    fn(*arg_shapes, out_shape=..., **kwargs)) for this call only; they take
    priority over the built-in ones.
    modules: also attribute FLOPs to the nn.Modules running (forward and
    backward) in `by_module`, keyed by FlopCounterMode's module labels. Off by
    default: it adds Python hooks to every module call.
    Errors raised by the workload propagate unchanged. A generator or async
    function is refused (calling it runs none of its body): pass a plain function.
    A torch.export ExportedProgram is run on the inputs it was exported with
    (`ep.module()(*args, **kwargs)` from `ep.example_inputs`): the way to
    count a model deployed with AOTInductor, whose compiled kernels a scan
    cannot see.
    """
    if _aoti.is_exported_program(workload):
        workload = _aoti.exported_workload(workload, "measure_flops")
    elif _aoti.is_aoti_model(workload):
        raise TypeError("torchscan.measure_flops(workload): got an AOTInductor model, not a zero-argument "
                        f"workload; {_aoti.AOTI_HINT}. For its lower bound, pass lambda: model(*args)")
    if not callable(workload):
        raise TypeError("torchscan.measure_flops(workload): workload must be a zero-argument callable, "
                        f"got {type(workload).__name__}")
    if not isinstance(modules, bool):
        raise TypeError(f"torchscan.measure_flops: modules must be True or False, got {type(modules).__name__}")
    s = FlopScan(custom_mapping, modules=modules)
    result = s._run(workload)
    _refuse_unstarted(result)
    return s.report()


def _refuse_unstarted(result: Any) -> None:
    """A workload that returned a generator or coroutine ran none of its body:
    its report would be a complete zero. Closes it (which also silences
    "coroutine ... was never awaited") and says what to pass instead."""
    if inspect.iscoroutine(result):
        kind, fix = "a coroutine (it is an async def)", "lambda: asyncio.run(workload())"
    elif inspect.isgenerator(result):
        kind, fix = "a generator (it contains yield)", "lambda: list(workload())"
    elif inspect.isasyncgen(result):
        kind, fix = "an async generator", "a plain function that runs it to the end"
    else:
        return
    if not inspect.isasyncgen(result):  # an unstarted async generator needs no closing
        result.close()
    raise TypeError(f"torchscan.measure_flops(workload): workload() returned {kind}, so none of its body "
                    f"ran and there is nothing to count; pass a function that does the work, e.g. {fix}")
