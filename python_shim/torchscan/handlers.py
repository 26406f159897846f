"""Per-analysis custom module handlers (crawl_module(custom_modules=...),
report schema "Custom handler rows").

A handler estimates the module-view metrics of module calls the built-in
formulas cannot value (a custom block, an einops rearrange, a custom
kernel) or values differently. It is scoped to one crawl_module / summary
call: nothing is registered globally.

Matching. custom_modules maps keys to handlers. A key is an nn.Module
subclass (matches isinstance) or a predicate(module) -> bool. Every module of
the crawled tree is matched once, before the model runs, against the keys in
the mapping's order: the first key that matches wins (put specific keys
before general ones). Predicates run only then, never per call.

The call. After each call of a matched module returns, the handler runs as
handler(module, args, kwargs, output) with the actual objects of that call:
the positional arguments as a tuple and the keyword arguments as a dict, as
the forward received them (an in-place forward has already changed them),
and the output the forward returned. It runs with the scan's recording
paused, so its own tensor operations are never counted; gradients are off,
as for the whole crawl. A call whose forward raised runs no handler (its
estimates are unavailable, as without one).

The result. A mapping from supported metric names (module_flops, macs,
dmas: the module view's; receptive fields come from the data flow and are
not supplied) to either an int (complete) or a structured result
{"status": "complete" | "partial" | "unavailable", "value" (complete),
"known_value" (partial: a lower bound), "scope": "module_call" | "subtree",
"method": str}. Metrics are overridden independently: a metric the result
omits keeps the built-in value, unless the handler declared it
(ModuleHandler(metrics=...)), in which case it is unavailable.

Ownership. scope "module_call" (the default) replaces the call's own
exclusive value (its children keep theirs). scope "subtree" is inclusive:
the handler owns the metric for everything the call ran; the rows of the
calls inside it keep their structure, inputs, outputs and parameters but not
the metric, and name the owner in metric_owners. Ownership follows the
dynamic calls: a shared child called outside the owner's call counts on its
own. When owners nest, the outermost owner wins (the inner handler's value
for that metric is covered). Totals count each retained estimate once;
parameter totals never change.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Mapping as _MappingABC
from threading import get_ident
from typing import Callable, Dict, List, Optional, Tuple

import torch.nn as nn

from torchscan import _metric
from torchscan._modules import AnalysisPause, ForwardHooks, forward_raised, safe_text

__all__ = ["ModuleHandler", "SUPPORTED_METRICS"]

SUPPORTED_METRICS = ("module_flops", "macs", "dmas")
_SCOPES = ("module_call", "subtree")
_RESULT_KEYS = ("status", "value", "known_value", "scope", "method")

# Native modules whose built-in (module view) estimate covers work of child
# modules that their forward never calls: MultiheadAttention reads
# out_proj's weights directly (both paths), and the Transformer layers' fused
# fast path runs one operator for the whole layer. These are the "legacy
# atomic roots" of the schema: a handler matched to such a child opens them.
_ATOMIC_NATIVE = (nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)


def _callback_name(fn) -> str:
    """<module>.<qualname> of a function or class; of its class for other
    callables (a callable object, functools.partial)."""
    if isinstance(getattr(fn, "__qualname__", None), str):
        module, qualname = getattr(fn, "__module__", None), fn.__qualname__
    else:
        module, qualname = type(fn).__module__, type(fn).__qualname__
    return safe_text(f"{module or '<unknown>'}.{qualname}")


class ModuleHandler:
    """A handler with what it supplies declared up front.

    fn(module, args, kwargs, output) -> mapping, as for a plain handler.
    metrics: the metric names this handler owns for every matched call (None:
    only those each result names). A declared metric the result omits is
    unavailable (custom_metric_unavailable) instead of keeping the built-in
    value, and if fn raises, exactly these are unavailable.
    scope: the ownership of int values and of structured results without a
    "scope" ("module_call" or "subtree")."""

    __slots__ = ("fn", "metrics", "scope", "method")

    def __init__(self, fn: Callable, *, metrics: Optional[Tuple[str, ...]] = None, scope: str = "module_call"):
        if isinstance(fn, ModuleHandler):
            fn = fn.fn
        if not callable(fn):
            raise TypeError(f"torchscan.ModuleHandler: fn must be callable as fn(module, args, kwargs, output), "
                            f"got {type(fn).__name__}")
        if metrics is not None:
            if isinstance(metrics, str):
                metrics = (metrics,)
            metrics = tuple(metrics)
            bad = [m for m in metrics if m not in SUPPORTED_METRICS]
            if bad or not metrics:
                raise ValueError(f"torchscan.ModuleHandler: metrics must name some of {', '.join(SUPPORTED_METRICS)}; "
                                 f"got {bad[0] if bad else 'none'!r}")
            metrics = tuple(dict.fromkeys(metrics))
        if scope not in _SCOPES:
            raise ValueError(f"torchscan.ModuleHandler: scope must be 'module_call' or 'subtree', got {scope!r}")
        self.fn, self.metrics, self.scope = fn, metrics, scope
        self.method = "custom_module_handler:" + _callback_name(fn)

    def __repr__(self):
        return f"ModuleHandler({self.method[len('custom_module_handler:'):]}, metrics={self.metrics}, scope={self.scope!r})"


# ---------------------------------------------------------------- set-up


def prepare(custom_modules, modules: list) -> Optional["Handlers"]:
    """custom_modules checked and matched against the crawled tree's modules
    (before the model runs); None when there is nothing to do."""
    where = "torchscan.crawl_module"
    if custom_modules is None:
        return None
    if not isinstance(custom_modules, _MappingABC):
        raise TypeError(f"{where}: custom_modules must be a mapping {{nn.Module subclass or predicate: handler}}, "
                        f"got {type(custom_modules).__name__}")
    keys = []
    for key, handler in custom_modules.items():
        if isinstance(key, type):
            if not issubclass(key, nn.Module):
                raise TypeError(f"{where}: custom_modules key {key.__qualname__} is a class that is not an "
                                "nn.Module subclass; keys are nn.Module subclasses (matched with isinstance) or "
                                "predicates predicate(module) -> bool")
            match = key
        elif callable(key):
            match = key
        else:
            raise TypeError(f"{where}: custom_modules key {key!r} is neither an nn.Module subclass nor a callable "
                            "predicate(module) -> bool")
        if not isinstance(handler, ModuleHandler) and not callable(handler):
            raise TypeError(f"{where}: custom_modules[{getattr(key, '__qualname__', key)!r}] must be a handler "
                            f"callable as handler(module, args, kwargs, output) -> mapping (or a "
                            f"torchscan.ModuleHandler), got {type(handler).__name__}")
        keys.append((match, handler if isinstance(handler, ModuleHandler) else ModuleHandler(handler)))
    if not keys:
        return None
    matched = {}
    for m in modules:
        for match, spec in keys:
            hit = isinstance(m, match) if isinstance(match, type) else match(m)
            if hit:
                matched[m] = spec
                break
    return Handlers(matched, modules)


# ---------------------------------------------------------------- results


def _count(v) -> int:
    """A metric value as an exact int, or ValueError saying why not."""
    if isinstance(v, bool) or v is None or isinstance(v, (str, bytes)):
        raise ValueError(f"{v!r} ({type(v).__name__}) is not a count")
    try:
        n = operator.index(v)
    except Exception:  # noqa: BLE001 -- TypeError, or whatever a foreign type raises
        try:
            f = float(v)
        except Exception:  # noqa: BLE001 -- e.g. a tensor of several elements
            raise ValueError(f"{type(v).__name__} {safe_text(repr(v))} is not a count") from None
        if not math.isfinite(f) or not f.is_integer():
            raise ValueError(f"{v!r} is not a whole number") from None
        n = int(f)
    if n < 0:
        raise ValueError(f"{n} is negative")
    if n > _metric.MAX_COUNT:
        raise ValueError(f"{n} exceeds 2**128 - 1, the largest count TorchScan holds exactly")
    return n


class _Entry:
    """One supplied metric of one call: a MetricResult and its ownership."""

    __slots__ = ("status", "known", "scope", "method")

    def __init__(self, status, known, scope, method):
        self.status, self.known, self.scope, self.method = status, known, scope, method


def _structured(name, value, spec, notes) -> _Entry:
    scope = spec.scope
    try:
        unknown = [k for k in value if k not in _RESULT_KEYS]
        if unknown:
            raise ValueError(f"unknown field {unknown[0]!r} (a structured result has {', '.join(_RESULT_KEYS)})")
        s = value.get("scope", scope)
        if s not in _SCOPES:
            raise ValueError(f"scope must be 'module_call' or 'subtree', got {s!r}")
        scope = s
        method = spec.method
        if value.get("method") is not None:
            if not isinstance(value["method"], str) or not value["method"]:
                raise ValueError(f"method must be a non-empty string, got {value['method']!r}")
            method = f"{spec.method}:{safe_text(value['method'])}"
        status = value.get("status", "complete")
        if status not in _metric.STATUSES:
            raise ValueError(_metric.status_problem(status, None, None, "result"))
        v, known = value.get("value"), value.get("known_value")
        if status == "complete":  # its figure may be given as either, or both
            v, known = (known if v is None else v), (v if known is None else known)
        v, known = (None if v is None else _count(v)), (None if known is None else _count(known))
        problem = _metric.status_problem(status, v, known, "result")
        if problem:
            raise ValueError(problem)
        if status == "partial":
            notes.append(("custom_metric_partial", "warning", name,
                          f"its handler's {name} estimate is partial: {known} is a lower bound"))
        elif status == "unavailable":
            notes.append(("custom_metric_unavailable", "warning", name,
                          f"its handler says its {name} estimate is unavailable"))
        return _Entry(status, known, scope, method)
    except ValueError as e:
        notes.append(("custom_metric_invalid", "error", name,
                      f"its handler's {name} result is invalid ({e}); the estimate is unavailable"))
        return _Entry("unavailable", None, scope, spec.method)


def _requested(spec) -> tuple:
    return spec.metrics if spec.metrics is not None else SUPPORTED_METRICS


def _failure(spec, code, message) -> tuple:
    """Every requested metric unavailable, with one diagnostic."""
    entries = {name: _Entry("unavailable", None, spec.scope, spec.method) for name in _requested(spec)}
    metric = next(iter(entries)) if len(entries) == 1 else "module_view"
    return entries, [(code, "error", metric, message)]


def evaluate(spec: ModuleHandler, mod, args, kwargs, output) -> tuple:
    """(entries {metric: _Entry}, notes [(code, severity, metric, message)])
    of one call. Exceptions that are not Exceptions (KeyboardInterrupt,
    SystemExit) propagate unchanged."""
    try:
        result = spec.fn(mod, args, kwargs, output)
    except Exception as e:  # noqa: BLE001 -- a handler's failure is a diagnostic, not the crawl's
        return _failure(spec, "custom_handler_error",
                        f"its handler {spec.method[len('custom_module_handler:'):]} raised "
                        f"{type(e).__name__}: {safe_text(str(e))}; the requested estimates are unavailable")
    if not isinstance(result, _MappingABC):
        return _failure(spec, "custom_handler_invalid",
                        f"its handler returned {type(result).__name__}, not a mapping of "
                        f"{', '.join(SUPPORTED_METRICS)}; the requested estimates are unavailable")
    try:
        items = list(result.items())
    except Exception as e:  # noqa: BLE001 -- a mapping that cannot be read
        return _failure(spec, "custom_handler_invalid",
                        f"its handler's result could not be read ({type(e).__name__}: {safe_text(str(e))})")
    bad = [k for k, _ in items if not isinstance(k, str) or k not in SUPPORTED_METRICS]
    if bad:
        return _failure(spec, "custom_handler_invalid",
                        f"its handler returned the unsupported metric name {safe_text(repr(bad[0]))} (handlers "
                        f"supply {', '.join(SUPPORTED_METRICS)}); the requested estimates are unavailable")
    entries: dict = {}
    notes: list = []
    for name, value in items:
        if isinstance(value, _MappingABC):
            try:
                entries[name] = _structured(name, value, spec, notes)
            except Exception as e:  # noqa: BLE001 -- a structured result that cannot be read
                notes.append(("custom_metric_invalid", "error", name,
                              f"its handler's {name} result could not be read ({type(e).__name__}); "
                              "the estimate is unavailable"))
                entries[name] = _Entry("unavailable", None, spec.scope, spec.method)
            continue
        try:
            entries[name] = _Entry("complete", _count(value), spec.scope, spec.method)
        except ValueError as e:
            notes.append(("custom_metric_invalid", "error", name,
                          f"its handler's {name} value is invalid ({e}); the estimate is unavailable"))
            entries[name] = _Entry("unavailable", None, spec.scope, spec.method)
    for name in spec.metrics or ():
        if name not in entries:
            notes.append(("custom_metric_unavailable", "warning", name,
                          f"its handler owns {name} but its result omits it; the estimate is unavailable"))
            entries[name] = _Entry("unavailable", None, spec.scope, spec.method)
    return entries, notes


# ---------------------------------------------------------------- the crawl


class Handlers:
    """The matched handlers of one crawl and the results of its calls. What
    the results do to the layer rows and totals (ownership, covered rows,
    opened estimates, the totals, the diagnostics) is decided by the engine
    (torchscan_dispatch/analyses/module_handlers.cc), which C++ handlers use
    too: results_json() hands them over."""

    def __init__(self, matched: Dict[nn.Module, ModuleHandler], modules: list):
        self.matched = matched
        self.results: Dict[int, tuple] = {}  # row index -> evaluate()'s (entries, notes)
        # Note [Opened estimates] (module_handlers.cc): each native layer of the
        # tree whose built-in estimate covers handled descendants, with them.
        self._atomic = {}
        for m in modules:
            if isinstance(m, _ATOMIC_NATIVE):
                handled = [(d, between) for d, between in _descendants(m) if d in matched]
                if handled:
                    self._atomic[m] = handled
        self._spans: List[Tuple[int, int]] = []  # (row, one past its last row inside) per call of those layers
        self._hooks: List[ForwardHooks] = []

    def add_hooks(self, calls: list, pause: AnalysisPause) -> None:
        """Hooks on the matched modules (and the native layers above them),
        added after crawl_module's own: their pre-hook runs after the one
        that appends the call's entry to `calls` (its index is the call's
        row) and their post-hook after the one that closes its scope. `pause`
        is the crawl's (its thread, its analysis depth): the hooks act as the
        crawl's own do. remove_hooks() takes them out, also after an
        interrupted add."""
        stack: list = []
        results, matched = self.results, self.matched

        def pre_hook(mod, hook_args, hook_kwargs=None):  # (Note [Hooks other threads call] in _modules.py)
            if pause.depth or get_ident() != pause.thread:  # called by a handler, or not the crawl's thread
                return
            stack.append(len(calls) - 1)

        def post_hook(mod, hook_args, hook_kwargs, output=None):
            if pause.depth or get_ident() != pause.thread:
                return
            index = stack.pop()
            if forward_raised(output):  # no callback
                return
            with pause:
                results[index] = evaluate(matched[mod], mod, hook_args, hook_kwargs, output)

        spans, open_spans = self._spans, []

        def span_pre_hook(mod, hook_args, hook_kwargs=None):
            if pause.depth or get_ident() != pause.thread:
                return
            open_spans.append(len(calls) - 1)

        def span_post_hook(mod, hook_args, hook_kwargs, output=None):
            if pause.depth or get_ident() != pause.thread:
                return
            spans.append((open_spans.pop(), len(calls)))

        for hooked, pre, post in ((matched, pre_hook, post_hook), (self._atomic, span_pre_hook, span_post_hook)):
            hooks = ForwardHooks(pre, post)
            self._hooks.append(hooks)  # first: remove_hooks() cleans up a partial add
            for m in hooked:
                hooks.add(m)

    def remove_hooks(self) -> None:
        """Takes every hook out. Idempotent, as ForwardHooks.remove is:
        crawl_module calls it again when an interrupt (Ctrl-C) lands in the
        first call, and an interrupt in one set's removal still removes the
        other."""
        _remove_all(self._hooks)

    def results_json(self, calls: list, names: dict) -> str:
        """The handlers' results by row, as Session.set_module_results takes
        them (ModuleResultsFromJson in module_handlers.h): the supplied
        metrics and diagnostics of each call, and the native layer calls
        whose built-in estimates cover handled modules they never called."""
        out: list = []
        for index, (entries, notes) in sorted(self.results.items()):
            out.append({
                "row": index,
                "metrics": {m: {"status": e.status, "known_value": None if e.known is None else str(e.known),
                                "scope": e.scope, "method": e.method} for m, e in entries.items()},
                "diagnostics": [{"code": code, "severity": severity, "metric": metric, "message": message}
                                for code, severity, metric, message in notes],
            })
        for start, end in self._spans:
            mod = calls[start][0]
            inside = {calls[j][0] for j in range(start + 1, end)}
            # Handled descendants this call ran none of, whose work is its
            # own: no module between it and them was called inside it either.
            missed = [names.get(d, "") for d, between in self._atomic[mod]
                      if d not in inside and not any(b in inside for b in between)]
            if missed:
                out.append({"row": start, "opens": {"type": safe_text(type(mod).__name__), "covers": missed}})
        return json.dumps(out)


def _remove_all(hooks: List[ForwardHooks]) -> None:
    if hooks:
        try:
            hooks[0].remove()
        finally:
            _remove_all(hooks[1:])


def _descendants(mod: nn.Module) -> list:
    """(descendant, the modules between mod and it) for every module under mod."""
    out: list = []
    stack: List[tuple] = [(c, ()) for c in mod._modules.values()]
    while stack:
        m, between = stack.pop()
        if m is None:
            continue
        out.append((m, between))
        stack.extend((c, between + (m,)) for c in m._modules.values())
    return out
