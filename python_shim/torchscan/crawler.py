"""Module analysis: one eval forward with per-layer rows (report schema
"AnalysisReport"). Layers are scopes in the C++ session, so every operator a
module's forward runs, functional calls included, lands on that layer call."""

from __future__ import annotations

import platform
import sys
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import torch
import torch.nn as nn

from torch.utils._pytree import tree_flatten

from torchscan.flops import FlopScan
from torchscan.metadata import describe

__all__ = ["crawl_module", "compare_reports", "render_report", "summary"]

_COMPUTE = ("module_flops", "macs", "dmas")


def _metric(status, value=None, unit="FLOPs", scope="forward", method="not_requested"):
    known = value if status != "unavailable" else None
    return {"status": status, "value": value if status == "complete" else None, "known_value": known,
            "unit": unit, "scope": scope, "method": method}


def _generated_inputs(input_shape, dtype, device):
    shapes = [input_shape] if isinstance(input_shape[0], int) else list(input_shape)
    return tuple(torch.rand((1, *shape), dtype=dtype, device=device) for shape in shapes)


def _parameter_stats(module: nn.Module) -> dict:
    params = list(module.parameters(recurse=False))
    buffers = list(module.buffers(recurse=False))
    return {
        "parameters": sum(p.numel() for p in params),
        "trainable_parameters": sum(p.numel() for p in params if p.requires_grad),
        "parameter_bytes": sum(p.numel() * p.element_size() for p in params),
        "buffers": sum(b.numel() for b in buffers),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in buffers),
    }


def crawl_module(module: nn.Module, input_shape: Optional[Sequence] = None, *, args: Optional[Sequence] = None,
                 kwargs: Optional[Mapping[str, Any]] = None, mode: str = "full", strict: bool = False,
                 dtype: Optional[torch.dtype] = None, device: Optional[torch.device] = None,
                 custom_mapping: Optional[Mapping[Any, Callable]] = None) -> dict:
    """One forward in eval mode with gradients disabled; returns the schema-v1
    AnalysisReport. Generated inputs (input_shape) add a batch dimension of
    one; args/kwargs are forwarded unchanged. Every module's training flag is
    restored afterwards, also when the forward raises."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"torchscan.crawl_module: module must be a torch.nn.Module, got {type(module).__name__}")
    if mode not in ("full", "structure"):
        raise ValueError(f"torchscan.crawl_module: mode must be 'full' or 'structure', got {mode!r}")
    if (input_shape is None) == (args is None and kwargs is None):
        raise ValueError("torchscan.crawl_module: pass either input_shape (generated inputs) or args/kwargs")
    if input_shape is not None:
        if dtype is None:
            dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)
        if device is None:
            device = next((p.device for p in module.parameters()), torch.device("cpu"))
        call_args, call_kwargs, source = _generated_inputs(input_shape, dtype, device), {}, "generated"
    else:
        call_args, call_kwargs, source = tuple(args or ()), dict(kwargs or {}), "caller"

    names = {m: n for n, m in module.named_modules(remove_duplicate=False)}
    training = {m: m.training for m in module.modules()}
    scan = FlopScan(custom_mapping, scope="forward")
    session = scan._session
    open_scopes: list = []
    calls: list = []  # per layer call, in scope order: (module, inputs metadata, output metadata)

    def pre_hook(mod, hook_args, hook_kwargs):
        open_scopes.append((session.push_module_scope(names.get(mod, "")), len(calls)))
        calls.append([mod, describe(tuple(hook_args)) if not hook_kwargs else
                      {"kind": "call", "args": describe(tuple(hook_args)), "kwargs": describe(hook_kwargs)},
                      None])

    def post_hook(mod, hook_args, hook_kwargs, output):
        scope, index = open_scopes.pop()
        # always_call: `output` is None when the forward raised.
        failed = sys.exc_info()[0] is not None
        # Output identities (TensorImpl addresses) let the data flow find the
        # receptive field of exactly this call's output.
        flat, _ = tree_flatten(output)
        session.pop_module_scope(scope, failed, [t._cdata for t in flat if isinstance(t, torch.Tensor)])
        calls[index][2] = {"kind": "failed"} if failed else describe(output)

    handles = []
    try:
        for m in module.modules():
            handles.append(m.register_forward_pre_hook(pre_hook, with_kwargs=True))
            handles.append(m.register_forward_hook(post_hook, with_kwargs=True, always_call=True))
        module.eval()
        with torch.no_grad(), scan:
            module(*call_args, **call_kwargs)
    finally:
        for h in handles:
            h.remove()
        for m, flag in training.items():
            m.train(flag)

    return _build_report(module, scan, calls, mode, strict, source, call_args, call_kwargs, training)


def _build_report(module, scan, calls, mode, strict, source, call_args, call_kwargs, training) -> dict:
    import json

    import torchscan

    session = scan._session
    rows = json.loads(session.layers())
    full = mode == "full"
    flop_report = scan.report() if full else None
    module_report = scan.module_report() if full else None
    diagnostics = []
    layers = []
    for row, (mod, inputs, output) in zip(rows, calls):
        metrics = {}
        for name in _COMPUTE:
            if full:
                metrics[name] = row["metrics"][name]
            else:
                metrics[name] = _metric("unavailable", unit="MACs" if name == "macs" else "FLOPs")
        for name in ("receptive_field", "effective_stride", "effective_padding"):
            metrics[name] = row["metrics"][name] if full else _metric("unavailable", unit="positions")
        if row["failed"]:
            diagnostics.append({"code": "module_forward_error", "severity": "error", "metric": "module_flops",
                                "message": f"{row['path'] or '(root)'} raised inside its forward; "
                                           "its estimates are unavailable", "path": row["path"]})
        layers.append({
            "path": row["path"], "call_index": row["call_index"], "name": row["path"].split(".")[-1] or
            type(mod).__name__, "depth": row["depth"], "type": type(mod).__name__, "inputs": inputs,
            "output": output, **_parameter_stats(mod), "metrics": metrics,
        })

    unique_params = {id(p): p for p in module.parameters()}.values()
    unique_buffers = {id(b): b for b in module.buffers()}.values()
    totals = {
        "parameters": sum(p.numel() for p in unique_params),
        "trainable_parameters": sum(p.numel() for p in unique_params if p.requires_grad),
        "frozen_parameters": sum(p.numel() for p in unique_params if not p.requires_grad),
        "parameter_bytes": sum(p.numel() * p.element_size() for p in unique_params),
        "buffer_elements": sum(b.numel() for b in unique_buffers),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in unique_buffers),
    }
    if full:
        totals.update({name: module_report["totals"][name] for name in _COMPUTE})
        totals["operator_flops"] = flop_report["total"]
        diagnostics += flop_report["diagnostics"] + module_report["diagnostics"]
    else:
        for name in _COMPUTE + ("operator_flops",):
            totals[name] = _metric("unavailable", unit="MACs" if name == "macs" else "FLOPs")
        flop_report = {"schema_version": 1, "context": {}, "total": totals["operator_flops"], "by_module": {},
                       "by_operator": {}, "ignored_operators": {}, "diagnostics": []}

    report = {
        "schema_version": 1,
        "context": {
            "torchscan_version": torchscan.__version__, "torch_version": torch.__version__,
            "python_version": platform.python_version(), "model_type": type(module).__name__,
            "execution_mode": "eval_no_grad", "analysis_mode": mode,
            "training_before": training.get(module, False),
            "devices": sorted({str(t.device) for t in list(module.parameters()) + list(module.buffers())}),
            "dtypes": sorted({str(t.dtype).replace("torch.", "") for t in list(module.parameters())}),
        },
        "inputs": {"source": source, "args": describe(tuple(call_args)), "kwargs": describe(call_kwargs)},
        "layers": layers,
        "totals": totals,
        "operator_flops": flop_report,
        "diagnostics": diagnostics,
    }
    if strict:
        incomplete = [n for n in _COMPUTE + ("operator_flops",) if full and totals[n]["status"] != "complete"]
        if incomplete:
            raise RuntimeError(f"torchscan.crawl_module(strict=True): {', '.join(incomplete)} incomplete; "
                               f"diagnostics: {[d['code'] + ':' + str(d.get('operator', d.get('path'))) for d in diagnostics]}")
    return report


def _report_json(report, where: str, what: str = "the report") -> str:
    """A report mapping as JSON text for the C++ readers; what cannot be JSON
    (NaN, a tensor, a cycle, absurd nesting) is refused here, by name."""
    import json

    try:
        return json.dumps(report, allow_nan=False)
    except TypeError as e:
        raise TypeError(f"{where}: {what} is not JSON-serializable ({e}); pass the report dict as saved") from None
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{where}: {what} is not valid JSON ({e})") from None


def _compare_json_text(before: str, after: str, before_file: str = "", after_file: str = "") -> str:
    """ReportDiff JSON text of two reports given as JSON text; the file names
    (when known) appear in error messages, with "before"/"after"."""
    from torchscan._library import Session

    return Session.compare_reports(before, after, before_file, after_file)


def _render_json_text(text: str, max_depth: Optional[int] = None, receptive_field: bool = False,
                      file: str = "") -> str:
    """render_report for a report given as JSON text; `file` names it in errors."""
    from torchscan._library import Session

    depth = -1 if max_depth is None else int(max_depth)
    return Session.render_report(text, depth, bool(receptive_field), file)


def compare_reports(before: Mapping, after: Mapping) -> dict:
    """ReportDiff of two saved reports of the same kind: two AnalysisReports
    (layer calls matched by path and call index) or two FlopReports (total and
    by_operator). Numeric deltas only when both sides are complete. A report
    that does not match the schema is a ValueError naming the side and field."""
    import json

    where = "torchscan.compare_reports"
    return json.loads(_compare_json_text(_report_json(before, where, "the before report"),
                                         _report_json(after, where, "the after report")))


def render_report(report: Mapping, max_depth: Optional[int] = None, receptive_field: bool = False) -> str:
    """Text rendering of a saved AnalysisReport or FlopReport; measures nothing.
    receptive_field adds receptive-field, effective-stride and padding columns."""
    return _render_json_text(_report_json(report, "torchscan.render_report"), max_depth, receptive_field)


def summary(module: nn.Module, input_shape: Optional[Sequence] = None, *, max_depth: Optional[int] = None,
            receptive_field: bool = False, **crawl_options) -> dict:
    """Print a readable table of crawl_module's report and return the report."""
    report = crawl_module(module, input_shape, **crawl_options)
    print(render_report(report, max_depth, receptive_field))
    return report
