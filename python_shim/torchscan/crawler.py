"""Module analysis: one eval forward with per-layer rows (report schema
"AnalysisReport"). Layers are scopes in the C++ session, so every operator a
module's forward runs, functional calls included, lands on that layer call."""

from __future__ import annotations

import ctypes
import gc
import json
import platform
from threading import get_ident
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import torch
import torch.nn as nn

from torch.utils._pytree import tree_flatten

from torchscan import _aoti
from torchscan import _metric as _metric_result
from torchscan import distributed as _distributed
from torchscan import handlers as _handlers
from torchscan import token_flow, tokens
from torchscan._inputs import _dimension, _input_shapes, _generated_inputs, _caller_inputs
from torchscan._layers import _FIELDS, PREPARE_MIN_CALLS, Parameters, _memory_metrics, _module_rows, prepare
from torchscan._library import entry_point
from torchscan._modules import AnalysisPause, ForwardHooks, forward_raised, safe_text
from torchscan.flops import FlopScan
from torchscan._snapshots import (_TupleOutput, _call_snapshot, _described_call, _described_inputs,  # noqa: F401
                                  _described_snapshot, _snapshots, _tensor_metadata, _tuple_snapshot)
from torchscan.metadata import describe

__all__ = ["crawl_module", "compare_reports", "render_report", "summary"]

_COMPUTE = ("module_flops", "macs", "dmas")


def _metric(status, value=None, unit="FLOPs", scope="forward", method="not_requested"):
    return _metric_result.metric(status, value, unit=unit, scope=scope, method=method)


def _check_flag(value, name: str, where: str) -> None:
    """A True/False option: anything else (a string such as "yes", 1, None)
    is a TypeError, not read as its truth value."""
    if not isinstance(value, bool):
        raise TypeError(f"{where}: {name} must be True or False, got {value!r} ({type(value).__name__})")


def _check_max_depth(max_depth, where: str) -> None:
    if max_depth is None:
        return
    if isinstance(max_depth, bool) or _dimension(max_depth) is None:
        raise TypeError(f"{where}: max_depth must be an int (0 shows the root only) or None for every layer; "
                        f"got {type(max_depth).__name__}")
    if max_depth < 0:
        raise ValueError(f"{where}: max_depth must be 0 or more (or None for every layer); got {max_depth}")


def _unique_modules(module: nn.Module) -> tuple:
    """named_modules(remove_duplicate=False) as a list, and the distinct
    modules in modules() order. Built with one explicit stack: named_modules
    nests one generator per level, so a chain of depth d costs O(d) per module
    there (quadratic overall)."""
    named, stack = [], [("", module)]
    while stack:
        entry = stack.pop()
        named.append(entry)
        prefix, m = entry
        children = m._modules
        if children:  # leaves (most modules) have none
            dot = prefix + "." if prefix else ""
            stack.extend(reversed([(dot + n, c) for n, c in children.items() if c is not None]))
    return named, list(dict.fromkeys([m for _, m in named]))


_NATIVE_SCOPES: list = []  # [(push, pop, pop_1) or None], once loaded


def _native_scopes():
    """The library's C entry points for module scopes (torchscan_push_module_scope,
    torchscan_pop_module_scope in torchscan_dispatch/integrations/bindings.cc) through
    ctypes, or None when they cannot be reached (the hooks then use the
    session's methods)."""
    if not _NATIVE_SCOPES:
        fns = tuple(entry_point(name) for name in ("torchscan_push_module_scope", "torchscan_pop_module_scope",
                                                   "torchscan_pop_module_scope_1"))
        _NATIVE_SCOPES.append(fns if all(fn is not None for fn in fns) else None)
    return _NATIVE_SCOPES[0]


def crawl_module(module: nn.Module, input_shape: Optional[Sequence] = None, *, args: Optional[Sequence] = None,
                 kwargs: Optional[Mapping[str, Any]] = None, mode: str = "full", strict: bool = False,
                 dtype: Optional[torch.dtype] = None, device: Optional[torch.device] = None,
                 custom_mapping: Optional[Mapping[Any, Callable]] = None, memory: bool = False,
                 custom_modules: Optional[Mapping[Any, Callable]] = None, trace: bool = False) -> dict:
    """One forward in eval mode with gradients disabled; returns the schema-v1
    AnalysisReport. memory: also attribute the allocator's blocks to the
    layer calls (metrics peak_memory and allocated_bytes, totals
    peak_memory, the report's "memory" section). trace: also time every
    module and operator call; the report's "trace" is then a Chrome /
    Perfetto trace of the forward. Generated inputs (input_shape: a tuple of positive ints
    per input, without the batch dimension) add a batch dimension of one;
    args (a tuple or list; a single tensor is taken as the one positional
    argument) and kwargs (a mapping) are forwarded unchanged. Every module's
    training flag is restored afterwards, also when the forward raises or is
    interrupted. custom_modules: {nn.Module subclass or predicate(module):
    handler} for this analysis only; handler(module, args, kwargs, output)
    returns module-view estimates (module_flops, macs, dmas) of each matched
    call (torchscan.handlers says how)."""
    # Python's cyclic GC paused for the call: the per-layer metadata (a few
    # dicts per layer call, kept until the report is built) otherwise triggers
    # collections that walk the whole heap, measured at about a tenth of a
    # crawl's time on MobileNetV3. Non-cyclic garbage is still freed at once.
    gc_was_enabled = gc.isenabled()
    try:
        try:
            gc.disable()  # inside the try: an interrupt right after it still re-enables
            return _crawl_module(module, input_shape, args=args, kwargs=kwargs, mode=mode, strict=strict,
                                 dtype=dtype, device=device, custom_mapping=custom_mapping, memory=memory,
                                 custom_modules=custom_modules, trace=trace)
        finally:
            if gc_was_enabled:
                gc.enable()
    except BaseException:  # once more: an interrupt (Ctrl-C) can land in the finally itself
        if gc_was_enabled:
            gc.enable()
        raise


_LEAVES = (bool, int, float, str)  # leaves of a pytree that are not tensors


def _tensor_ids(output) -> list:
    """Identities of the output's tensors, in tree_flatten's order; a flat
    tuple or list (what most modules return that is not a tensor) without
    tree_flatten, which costs more than the rest of a module call's hook."""
    if type(output) in (tuple, list):
        ids = []
        for x in output:
            if type(x) is torch.Tensor:
                ids.append(x._cdata)
            elif not (x is None or type(x) in _LEAVES):
                break  # nested, or a tensor subclass: tree_flatten decides
        else:
            return ids
    flat, _ = tree_flatten(output)
    return [t._cdata for t in flat if isinstance(t, torch.Tensor)]


_NO_PATH = (b"", 0)  # a module outside the crawled tree (not hooked: never looked up in practice)


def _eval(module: nn.Module, modules: list) -> None:
    """module.eval(). When no module in the tree overrides eval or train,
    that sets every module's flag to False (Module.train recursing through
    children(), which reaches exactly `modules`): the flags are set here
    without the recursion's calls, and only where they are not False yet;
    a tree already in eval mode is left as it is."""
    flags = [m for m in modules if m.training is not False]
    if not flags:  # already in eval mode (a model in use): eval() would change nothing; overrides are not re-run
        return
    train = nn.Module.train
    if type(module).eval is not nn.Module.eval or any(type(m).train is not train for m in modules):
        module.eval()
        return
    for m in flags:
        m.training = False


def _crawl_module(module, input_shape, *, args, kwargs, mode, strict, dtype, device, custom_mapping, memory,
                  custom_modules=None, trace=False) -> dict:
    if not isinstance(module, nn.Module):
        hint = ""
        if _aoti.is_exported_program(module):
            hint = "; for an ExportedProgram, pass ep.module() (its layers are one flat graph)"
        elif _aoti.is_aoti_model(module):
            hint = f"; {_aoti.AOTI_HINT}"
        raise TypeError(f"torchscan.crawl_module: module must be a torch.nn.Module, got {type(module).__name__}"
                        + hint)
    for flag, value in (("strict", strict), ("memory", memory), ("trace", trace)):
        _check_flag(value, flag, "torchscan.crawl_module")
    if not isinstance(mode, str) or mode not in ("full", "structure"):
        raise ValueError(f"torchscan.crawl_module: mode must be 'full' or 'structure', got {mode!r}")
    if (input_shape is None) == (args is None and kwargs is None):
        raise ValueError("torchscan.crawl_module: pass either input_shape (generated inputs) or args/kwargs")
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"torchscan.crawl_module: dtype must be a torch.dtype such as torch.float32, got {dtype!r}")
    if device is not None and (isinstance(device, bool) or not isinstance(device, (torch.device, str, int))):
        raise TypeError("torchscan.crawl_module: device must be a torch.device, a device string such as 'cpu', "
                        f"or None (the parameters' device), got {type(device).__name__}")
    named, modules = _unique_modules(module)
    # Checked and matched before the model runs; None without handlers (the
    # hooks below are then exactly those of a crawl without them).
    handlers = _handlers.prepare(custom_modules, modules)
    if mode != "full":
        handlers = None  # structure mode runs no formulas and no handlers
    if input_shape is not None:
        shapes = _input_shapes(input_shape)
        params = [p for m in modules for p in m._parameters.values() if p is not None]
        if dtype is None:
            # Lists, not next(generator): a suspended generator finalized later
            # would swallow an interrupt that lands in it.
            floating = [p.dtype for p in params if p.is_floating_point()]
            dtype = floating[0] if floating else torch.float32
        elif not (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(f"torchscan.crawl_module: generated inputs are random numbers in [0, 1), so dtype "
                            f"must be a floating dtype, got {dtype}; pass args=(...) for integer inputs")
        if device is None:
            device = params[0].device if params else torch.device("cpu")
        call_args, call_kwargs, source = _generated_inputs(shapes, dtype, device), {}, "generated"
    else:
        (call_args, call_kwargs), source = _caller_inputs(args, kwargs), "caller"

    # Paths go to the C++ session and into JSON: valid UTF-8 only.
    names = {m: safe_text(n) for n, m in named}
    training = {m: m.training for m in modules}
    scan = FlopScan(custom_mapping, scope="forward", memory=memory, trace=trace)
    session = scan._session
    open_scopes: list = []
    # Per layer call, in scope order: [module, inputs metadata, output
    # metadata, input snapshots, output snapshot]; a snapshot (_snapshots,
    # _tuple_snapshot) stands for the metadata not described yet.
    calls: list = []
    Tensor = torch.Tensor

    # The hooks run for every layer call. Scopes are pushed and popped through
    # the library's C entry points (_native_scopes) where they are available:
    # the custom class's methods cost several microseconds a call.
    native = _native_scopes()
    handle = session.native_handle() if native is not None else 0
    if handle:
        push, pop, pop_1 = native
        encoded = {m: (b, len(b)) for m, b in ((m, n.encode()) for m, n in names.items())}
    else:
        push = pop = pop_1 = encoded = None
        handle = 0
    is_compiling = torch.compiler.is_compiling
    # This crawl's own state, read by its hooks: they act only on this thread
    # (a forward of the same modules in another thread is not this crawl's)
    # and not inside TorchScan's own analysis.
    pause = AnalysisPause()

    # When the model is torch.compile'd, Dynamo traces these hooks. While it
    # does, they go through the session's methods, looked up on each call:
    # Dynamo must stop at the custom class before it reaches `names` (modules
    # as keys fail its tracking; test_transforms' inductor test). The frame
    # then runs eagerly, on the fast path.
    def traced_pre_hook(mod, hook_args, hook_kwargs=None):
        if pause.depth or get_ident() != pause.thread:  # TorchScan's own analysis, or not this crawl's thread
            return
        open_scopes.append((session.push_module_scope(names.get(mod, "")), len(calls)))
        calls.append([mod, _described_inputs(hook_args, hook_kwargs), None, None, None])

    def traced_post_hook(mod, hook_args, hook_kwargs, output=None):
        if pause.depth or get_ident() != pause.thread:  # TorchScan's own analysis, or not this crawl's thread
            return
        scope, index = open_scopes.pop()
        # always_call: `output` is None when the forward raised.
        failed = forward_raised(output)
        # Output identities (TensorImpl addresses) let the data flow find the
        # receptive field of exactly this call's output.
        if type(output) is Tensor:  # the common case, without tree_flatten's cost
            session.pop_module_scope(scope, failed, [output._cdata])
        else:
            flat, _ = tree_flatten(output)
            session.pop_module_scope(scope, failed, [t._cdata for t in flat if isinstance(t, Tensor)])
        calls[index][2] = {"kind": "failed"} if failed else describe(output)
        if flow is not None and not failed:
            tokens_after(mod, scope, index, hook_args, hook_kwargs, output)

    # Token dependencies (tokens.py for native attention layers, token_flow.py
    # for modules that run attention otherwise), after the scope is popped;
    # structure mode omits them. Their own tensor work is not the model's.
    # The analysis asks the library first whether the call ran attention or a
    # softmax (a C call), and pauses recording only for the calls that did.
    flow = token_flow.TokenFlow(bool(handle), pause, named) if mode == "full" else None

    def tokens_after(mod, scope, index, hook_args, hook_kwargs, output):
        if is_compiling():  # Dynamo tracing the hooks: no tensors to read
            return
        flow.after(mod, names.get(mod, ""), scope, index, hook_args, hook_kwargs, output)

    # The fast path. Plain dense tensors (the common inputs and outputs) are
    # snapshotted here (_snapshot) and described when the report is built:
    # describe()'s dicts cost more than the module call's other work.
    def pre_hook(mod, hook_args, hook_kwargs=None):  # (Note [Hooks other threads call])
        if pause.depth or get_ident() != pause.thread:  # TorchScan's own analysis, or not this crawl's thread
            return
        if is_compiling():
            return traced_pre_hook(mod, hook_args, hook_kwargs)
        path, size = encoded.get(mod, _NO_PATH)
        scope = push(handle, path, size)
        if scope < 0:  # refused: the method refuses it again, with the message
            scope = session.push_module_scope(names.get(mod, ""))
        open_scopes.append((scope, len(calls)))
        if hook_kwargs:
            snapshots = _call_snapshot(hook_args, hook_kwargs)
        elif len(hook_args) == 1 and type(hook_args[0]) is Tensor and not hook_args[0].is_nested:  # the common case
            a = hook_args[0]
            snapshots = ((a.shape, a.dtype, a.device, a.requires_grad),)
        else:
            snapshots = _snapshots(hook_args)
        if snapshots is None:
            calls.append([mod, _described_inputs(hook_args, hook_kwargs), None, None, None])
        else:
            calls.append([mod, None, None, snapshots, None])

    def post_hook(mod, hook_args, hook_kwargs, output=None):
        if pause.depth or get_ident() != pause.thread:  # TorchScan's own analysis, or not this crawl's thread
            return
        if is_compiling():
            return traced_post_hook(mod, hook_args, hook_kwargs, output)
        scope, index = open_scopes.pop()
        failed = forward_raised(output)
        # The C pop answers 1 when the call recorded attention or a softmax
        # (or that is not known), 0 when not: the token analysis's question.
        if type(output) is Tensor:
            identity = output._cdata
            ran = pop_1(handle, scope, failed, identity & 0xFFFFFFFF, identity >> 32)
            if ran < 0:
                session.pop_module_scope(scope, failed, [identity])
            if not failed and not output.is_nested:
                calls[index][4] = (output.shape, output.dtype, output.device, output.requires_grad)
                if flow is not None and flow.asks(mod, scope, ran != 0):  # not compiling (checked above)
                    flow.after(mod, names.get(mod, ""), scope, index, hook_args, hook_kwargs, output, ran != 0)
                return
        else:
            ids = _tensor_ids(output)
            ran = pop(handle, scope, failed, (ctypes.c_uint64 * len(ids))(*ids), len(ids))
            if ran < 0:
                session.pop_module_scope(scope, failed, ids)
        snapshot = None if failed else _tuple_snapshot(output)
        if snapshot is None:
            calls[index][2] = {"kind": "failed"} if failed else describe(output)
        else:
            calls[index][4] = snapshot
        if flow is not None and not failed and flow.asks(mod, scope, ran != 0):
            flow.after(mod, names.get(mod, ""), scope, index, hook_args, hook_kwargs, output, ran != 0)

    if push is None:  # no C entry points: the session's methods throughout
        pre_hook, post_hook = traced_pre_hook, traced_post_hook

    # Every change outside this crawl (hooks, training flags, grad mode, the
    # scan) is undone by undo(), which is idempotent. An interrupt (Ctrl-C)
    # can land anywhere, inside a first undo() too: the handler around it runs
    # undo() once more. Grad mode is set and restored by single C calls.
    hooks = ForwardHooks(pre_hook, post_hook)
    grad_was_enabled = torch.is_grad_enabled()

    def undo():
        pause.thread = 0  # first: hooks a removal misses do nothing from here on
        torch._C._set_grad_enabled(grad_was_enabled)
        try:
            try:
                hooks.remove()
            finally:
                if handlers is not None:
                    handlers.remove_hooks()
        finally:
            try:
                scan._cleanup()
            finally:
                _restore_training(training)

    try:
        try:
            for m in modules:
                hooks.add(m)
            if handlers is not None:
                handlers.add_hooks(calls, pause)
            _eval(module, modules)
            torch._C._set_grad_enabled(False)
            scan._run(module if flow is None else _then(module, flow.finish), call_args, call_kwargs)
            if handlers is None:
                _prepare_streams(scan, handle, calls, mode)
        finally:
            undo()
    except BaseException:
        undo()
        raise

    if handlers is not None:
        session.set_module_results(handlers.results_json(calls, names))
        _prepare_streams(scan, handle, calls, mode)
    report = _build_report(module, modules, scan, calls, mode, strict, source, call_args, call_kwargs, training,
                           memory, flow.results if flow is not None else {}, handle)
    if trace:
        report["trace"] = scan.trace()
        if mode == "structure":  # no FLOPs were requested: the slices say none
            for e in report["trace"]["traceEvents"]:
                e.get("args", {}).pop("flops", None)
    return report


def _then(module: nn.Module, finish: Callable[[], None]) -> Callable:
    """Calls module, then finish() (the token relations, asked once the
    forward returned and while the scan still runs: Note [Token relations
    asked after the forward] in token_flow.py)."""
    def call(*args, **kwargs):
        output = module(*args, **kwargs)
        finish()
        return output
    return call


def _prepare_streams(scan: FlopScan, handle: int, calls: list, mode: str) -> None:
    """Has the library write the stopped scan's rows (and, in the full mode,
    its reports) on a thread of its own while the hooks go and Python builds
    its part of the report (Note [Reports prepared on a second thread] in
    integrations/bindings.cc); _build_report takes them last. Not for
    caller formulas, which change the reports once resolved."""
    if handle and len(calls) >= PREPARE_MIN_CALLS and not scan._formulas:
        prepare(handle, 4 | (3 if mode == "full" else 0))


def _restore_training(training: dict) -> None:
    """Sets every module's training flag back, module by module: train(flag)
    would also set every descendant's (quadratic in depth, and not what was
    there before)."""
    for m, flag in training.items():
        if m.training is not flag:  # nn.Module.__setattr__ is slow; most flags are unchanged
            m.training = flag


def _mark_shared_parameters(layers: list, calls: list) -> None:
    """Tied weights (one tensor registered in two modules) count once in the
    totals; a module's first row whose parameters were already counted at an
    earlier module's row says how many (shared_parameters) and where
    (shared_with), so the rendered rows add up to the totals."""
    first: Dict[int, str] = {}  # id(parameter) -> path of the first row that holds it
    for layer, call in zip(layers, calls):
        if layer["call_index"] != 0:
            continue
        shared, owner = 0, None
        for p in call[0]._parameters.values():
            if p is None:
                continue
            seen = first.setdefault(id(p), layer["path"])
            if seen != layer["path"]:
                shared += p.numel()
                owner = seen if owner is None else owner
        if shared:
            layer["shared_parameters"] = shared
            layer["shared_with"] = owner


def _build_report(module, modules, scan, calls, mode, strict, source, call_args, call_kwargs, training,
                  memory, token_results, handle: int = 0) -> dict:
    import torchscan

    full = mode == "full"
    # Python's part first, all that does not depend on the engine's rows and
    # reports: the library may be writing them meanwhile (_prepare_streams),
    # and they are taken last.
    figures = Parameters(modules)
    stats = figures.by_module
    tensor = _tensor_metadata
    described = []  # per call: its module's type name and figures, its inputs and output metadata
    type_names: dict = {}  # per module class
    for mod, inputs, output, in_snapshots, out_snapshot in calls:
        cls = type(mod)
        type_name = type_names.get(cls)
        if type_name is None:
            type_name = type_names[cls] = safe_text(cls.__name__)
        mod_stats = stats.get(mod)
        if mod_stats is None:  # a module outside the tree (its hooks are the tree's): its own figures
            mod_stats = stats[mod] = Parameters([mod]).by_module[mod]
        if in_snapshots is not None:
            inputs = _described_call(in_snapshots)
        if out_snapshot is not None:
            output = (tensor(*out_snapshot) if type(out_snapshot) is not _TupleOutput else
                      {"kind": "tuple", "items": [None if t is None else tensor(*t) for t in out_snapshot]})
        described.append((type_name, mod_stats, inputs, output))
    unique_params, unique_buffers = figures.parameters.values(), figures.buffers.values()
    context = {
        "torchscan_version": torchscan.__version__, "torch_version": torch.__version__,
        "python_version": platform.python_version(), "model_type": safe_text(type(module).__name__),
        "execution_mode": "eval_no_grad", "analysis_mode": mode,
        "training_before": training.get(module, False),
        # str() once per distinct device and dtype.
        "devices": sorted({str(d) for d in {t.device for t in (*unique_params, *unique_buffers)}}),
        "dtypes": sorted({str(d).replace("torch.", "") for d in {t.dtype for t in unique_params}}),
    }
    described_inputs = {"source": source, "args": describe(tuple(call_args)), "kwargs": describe(call_kwargs)}
    distributed = _distributed.distributed_context()
    rows = _module_rows(scan._session, handle)  # handed over while the library still writes the reports
    diagnostics = []
    layers = []
    for row, (type_name, mod_stats, inputs, output) in zip(rows, described):
        path = row["path"]
        if full:
            metrics = row["metrics"]
        else:
            metrics = {name: _metric("unavailable", unit="MACs" if name == "macs" else "FLOPs") for name in _COMPUTE}
            for name in _FIELDS:
                metrics[name] = _metric("unavailable", unit="positions")
        if row["failed"]:
            diagnostics.append({"code": "module_forward_error", "severity": "error", "metric": "module_flops",
                                "message": f"{path or '(root)'} raised inside its forward; "
                                           "its estimates are unavailable", "path": path})
        layer = {"path": path, "call_index": row["call_index"], "name": path.rsplit(".", 1)[-1] or type_name,
                 "depth": row["depth"], "type": type_name, "inputs": inputs, "output": output, **mod_stats,
                 "metrics": metrics}
        # Custom module handlers' ownership, on the few rows that have it.
        if "metric_owners" in row:
            layer["metric_owners"] = row["metric_owners"]
        if "metric_ownership" in row:
            layer["metric_ownership"] = row["metric_ownership"]
        layers.append(layer)
    flop_report, module_report = scan._both_reports(handle) if full else (None, None)

    memory_report = _memory_metrics(scan._session, layers) if memory else None
    if token_results:
        for index, layer in enumerate(layers):
            result = token_results.get(index)
            if result is None:  # ran no attention, or its forward raised
                continue
            layer["token_dependencies"], reason = result
            tokens.not_applicable_fields(layer["metrics"], "forward")
            if reason is not None:
                diagnostics.append(tokens.diagnostic(layer["path"], reason))
    if figures.registered > len(unique_params):  # some tensor is registered twice (tied weights)
        _mark_shared_parameters(layers, calls)
    totals: Dict[str, Any] = dict(figures.totals)
    if flop_report is not None and module_report is not None:  # the full mode
        totals.update({name: module_report["totals"][name] for name in _COMPUTE})
        totals["operator_flops"] = flop_report["total"]
        diagnostics += flop_report["diagnostics"] + module_report["diagnostics"]
    else:
        for name in _COMPUTE + ("operator_flops",):
            totals[name] = _metric("unavailable", unit="MACs" if name == "macs" else "FLOPs")
        flop_report = {"schema_version": 1, "context": {}, "total": totals["operator_flops"], "by_module": {},
                       "by_operator": {}, "ignored_operators": {}, "diagnostics": []}

    report: Dict[str, Any] = {
        "schema_version": 1,
        "context": context,
        "inputs": described_inputs,
        "layers": layers,
        "totals": totals,
        "operator_flops": flop_report,
        "diagnostics": diagnostics,
    }
    # In a torch.distributed job: the rank's context and its collectives' bytes
    # (once, at the top level: the FlopReport inside does not repeat them).
    communication = flop_report.pop("communication", None)
    if distributed:
        report["context"].update(distributed)
        report["communication"] = (communication if communication is not None
                                   else json.loads(scan._session.scan_report())["communication"])
    if memory_report is not None:
        totals["peak_memory"] = memory_report["totals"]["peak_memory"]
        report["memory"] = memory_report
        diagnostics += memory_report["diagnostics"]
    if strict:
        checked = (_COMPUTE + ("operator_flops",) if full else ()) + (("peak_memory",) if memory else ())
        incomplete = [n for n in checked if totals[n]["status"] != "complete"]
        if incomplete:
            raise RuntimeError(f"torchscan.crawl_module(strict=True): {', '.join(incomplete)} incomplete; "
                               f"diagnostics: {[d['code'] + ':' + str(d.get('operator', d.get('path'))) for d in diagnostics]}")
    return report


# The readers and summary() live in torchscan._summary (imported last: it calls crawl_module).
from torchscan._summary import (SummaryReport, _compare_json_text, _render_json_text, _report_json,  # noqa: E402, F401
                                compare_reports, render_report, summary)
