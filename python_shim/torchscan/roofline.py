"""Roofline analysis from the executed data flow.

One scan records every ATen call of the workload; the engine
(torchscan_dispatch/analyses/traffic.cc) turns its kernels into FLOPs (the operator
view's values), bytes read and written (from the recorded operands and returns)
and two fused estimates (calls grouped when their intermediate tensors have no
consumer outside the group, decided from recorded tensor identities). This
module applies a GPU's peaks and bandwidth to those numbers:

    compute SoL = sum over kernels of FLOPs / peak(kernel class, precision)
    memory SoL  = fused bytes / memory bandwidth
    bottleneck  = the larger of the two
"""

from __future__ import annotations

import copy
import json
import math
import os
import threading
from collections.abc import Mapping
from typing import Any, Dict, Optional

import torch
from torch import nn

from torchscan._readers import validate_roofline_report
from torchscan._roofline_svg import roofline_svg  # noqa: F401 - importable from here, as before
from torchscan.workload import _refuse_unstarted

SCHEMA_VERSION = 1

# Bytes per floating element and the peak each precision uses.
PRECISIONS = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}

_GPUS_FILE = os.path.join(os.path.dirname(__file__), "gpus.json")
_gpu_table: Optional[dict] = None


def _table() -> dict:
    global _gpu_table
    if _gpu_table is None:
        with open(_GPUS_FILE, encoding="utf-8") as f:
            _gpu_table = json.load(f)
    return _gpu_table


def list_gpus() -> list:
    """The names `roofline(gpu=...)` accepts, from python_shim/torchscan/gpus.json."""
    return sorted(_table()["gpus"])


def gpu_spec(gpu) -> dict:
    """A GPU's spec: a name from list_gpus(), or a mapping
    {"name", "memory_bandwidth" (GB/s), "vector": {"fp32": TFLOPS, ...},
    "tensor": {"bf16": TFLOPS, ...}} for a GPU not in the table."""
    if isinstance(gpu, str):
        gpus = _table()["gpus"]
        key = gpu.lower()
        if key not in gpus:
            raise ValueError(f"torchscan.roofline: unknown gpu {gpu!r}; known: {', '.join(list_gpus())} "
                             "(or pass a mapping with memory_bandwidth, vector and tensor peaks)")
        spec = copy.deepcopy(gpus[key])  # the cached table stays as read
        spec["key"] = key
        return spec
    if isinstance(gpu, Mapping):
        spec = {"name": "custom", "vector": {}, "tensor": {}, "source": "caller", "uncertain": []}
        spec.update(copy.deepcopy(dict(gpu)))
        if not _positive(spec.get("memory_bandwidth")):
            raise ValueError("torchscan.roofline: a custom gpu needs memory_bandwidth > 0 (GB/s), got "
                             f"{spec.get('memory_bandwidth')!r}")
        for group in ("vector", "tensor"):
            peaks = spec.get(group) or {}
            if not isinstance(peaks, Mapping):
                raise ValueError(f"torchscan.roofline: a custom gpu's {group} must map precisions to TFLOPS, "
                                 f"got {type(peaks).__name__}")
            for name, value in peaks.items():
                if name not in PRECISIONS or not _positive(value):
                    raise ValueError(f"torchscan.roofline: a custom gpu's {group}.{name} must be a precision "
                                     f"({', '.join(PRECISIONS)}) with a peak > 0 (TFLOPS), got {value!r}")
            spec[group] = dict(peaks)
        if "fp32" not in spec["vector"]:
            raise ValueError("torchscan.roofline: a custom gpu needs vector.fp32 > 0 (TFLOPS)")
        spec["key"] = spec.get("key", spec["name"])
        return spec
    raise TypeError(f"torchscan.roofline: gpu must be a name or a mapping, got {type(gpu).__name__}")


def _positive(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)


def _bound(compute: float, memory: float) -> str:
    """The larger SoL time names the bound; a call that computes and moves nothing has none."""
    if compute == 0 and memory == 0:
        return "none"
    return "compute" if compute >= memory else "memory"


def _peaks(spec: dict, precision: str) -> tuple:
    """(matrix peak, vector peak) in FLOP/s, and the assumptions they rest on."""
    vec, ten = spec.get("vector") or {}, spec.get("tensor") or {}
    notes = []
    if precision == "fp32":
        if "fp32" in ten:
            matrix = ten["fp32"]
            notes.append("fp32 matmul/conv at the fp32 matrix-core peak")
        else:
            matrix = vec["fp32"]
            notes.append("fp32 matmul/conv on the vector units (no fp32 tensor-core path): vector.fp32 peak")
    else:
        if precision not in ten:
            raise ValueError(f"torchscan.roofline: {spec['name']} has no {precision} tensor peak in the GPU table")
        matrix = ten[precision]
        notes.append(f"matmul/conv/attention at the dense {precision} tensor-core peak")
    if precision in vec:
        vector = vec[precision]
        notes.append(f"pointwise/reduction/other work at the non-tensor-core {precision} peak")
    else:
        vector = vec["fp32"]
        notes.append(f"pointwise/reduction/other work at the non-tensor-core fp32 peak (no {precision} vector "
                     "peak listed: assumed to compute in fp32)")
    return matrix * 1e12, vector * 1e12, notes


class RooflineReport(dict):
    """A JSON-serialisable dict (schema_version, context, totals, operators,
    layers, diagnostics) with .print() and .to_svg(path)."""

    def render(self) -> str:
        return render_roofline(self)

    def print(self) -> None:  # noqa: A003 - the reference's name
        print(render_roofline(self))

    def to_svg(self, path: Optional[str] = None, *, points: str = "layers") -> str:
        svg = roofline_svg(self, points=points)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(svg)
        return svg


def _bytes(triple, bpe: int) -> int:
    """[float elements, other bytes, recorded bytes] at `bpe` bytes per floating element."""
    return triple[0] * bpe + triple[1]


def _row(flops: int, read: int, written: int, fused: int, matrix_flops: int, peaks: tuple, bw: float) -> dict:
    matrix_peak, vector_peak = peaks
    moved = read + written
    compute = matrix_flops / matrix_peak + (flops - matrix_flops) / vector_peak
    memory = moved / bw
    return {
        "flops": flops,
        "bytes_read": read,
        "bytes_written": written,
        "hbm_bytes": moved,
        "hbm_bytes_fused": fused,
        "arithmetic_intensity": flops / moved if moved else None,
        "compute_sol_ms": compute * 1e3,
        "memory_sol_ms": memory * 1e3,
        "bound": _bound(compute, memory),
    }


def _scan(workload_or_module, inputs):
    """Runs the workload once in a scan with module scopes; (traffic json, module or None)."""
    from torch.utils._pytree import tree_flatten

    from torchscan._modules import ForwardHooks, forward_raised
    from torchscan.flops import FlopScan

    scan = FlopScan(scope="forward")
    session = scan._session
    hooks = None
    module = workload_or_module if isinstance(workload_or_module, nn.Module) else None
    if module is None and not callable(workload_or_module):
        raise TypeError("torchscan.roofline: pass an nn.Module (with inputs) or a zero-argument callable, "
                        f"got {type(workload_or_module).__name__}")
    if module is None and inputs is not None:
        raise TypeError("torchscan.roofline: inputs apply to an nn.Module; a callable workload takes none")
    if module is not None:
        if inputs is None:
            raise TypeError("torchscan.roofline: an nn.Module needs inputs (a tensor, a tuple of arguments or a "
                            "dict of keyword arguments)")
        kwargs = dict(inputs) if isinstance(inputs, Mapping) else {}
        args = () if kwargs else inputs if isinstance(inputs, tuple) else (inputs,)
        names = {}
        for name, m in module.named_modules():
            names.setdefault(m, name or module.__class__.__name__)
        stack = []
        # The scan is this thread's: another thread's forward of the same
        # modules runs through the hooks and is left alone (Note [Hooks
        # other threads call] in _modules.py: it may call them without kwargs).
        owner = threading.get_ident()

        def pre(mod, _args, _kwargs=None):
            if threading.get_ident() != owner:
                return
            stack.append(session.push_module_scope(names.get(mod, "")))

        # Called also when the forward raises (always_call): a submodule whose
        # exception its parent catches leaves its scope, so later calls are not
        # attributed to it.
        def post(mod, _args, _kwargs, output=None):
            if threading.get_ident() != owner:
                return
            failed = forward_raised(output)
            flat, _ = tree_flatten(output)
            session.pop_module_scope(stack.pop(), failed, [t._cdata for t in flat if isinstance(t, torch.Tensor)])

        hooks = ForwardHooks(pre, post)

        def run():
            with torch.no_grad():
                return module(*args, **kwargs)
    else:
        run = workload_or_module
    try:
        if hooks is not None:
            for m in names:
                hooks.add(m)
        with scan:
            result = run()
    finally:
        if hooks is not None:
            hooks.remove()
    # A generator (or coroutine) function measured nothing: refused, not a zero roofline.
    _refuse_unstarted(result, "torchscan.roofline")
    return json.loads(session.traffic()), module


# Which results leave the program, by whether its outputs were seen (the traffic's outputs_known).
_OUTPUTS_KNOWN = (
    "Program outputs: the module's returned tensors (the outputs of its top-level scope, each as it stood when "
    "the forward returned) are written to HBM once each, also when a kernel of their own fused group reads them "
    "(h returned and consumed by the next pointwise call); a tensor returned twice or with a view of it is "
    "written once.")
_OUTPUTS_UNKNOWN = (
    "Program outputs: a callable's return value is not seen, so only results nobody reads count as its outputs: "
    "a returned tensor that is also read inside its own fused group (h returned and consumed by the next "
    "pointwise call) is not charged as written, and the fused estimate can be low by that tensor. Pass an "
    "nn.Module with inputs to have its outputs charged.")

_ASSUMPTIONS = [
    "Kernels are the calls the operator view values: a call whose formula owns its subtree is one kernel; a "
    "CompositeImplicitAutograd decomposition's children are its kernels.",
    "Unfused (eager upper bound): every kernel reads each distinct tensor operand once and writes each distinct "
    "return once from/to HBM; views, metadata and allocations move nothing; copies and fills move what they read "
    "and write; an in-place kernel writes its operand once; a call that returns its own operand (dropout in eval, "
    "x.to(x.dtype)) moves nothing.",
    "A broadcast (stride-0) dimension is read once: an expanded tensor moves its distinct elements.",
    "A lookup (embedding, index_select, gather) reads as many elements of its table as it writes.",
    "Parameters are read by every kernel that uses them (once per use); nothing stays in cache between kernels.",
    "Fused (compiler-style lower bound): pointwise kernels (and casts) joined through producer->consumer edges of "
    "recorded tensor identities form one kernel when every other operand comes from the group or from a kernel "
    "that ran before the group; only operands from outside the group, results read outside it or by nobody, and "
    "the program's outputs (see below) reach HBM. Matmul/conv epilogues are not fused.",
    "Fused with reduction epilogues (stated separately): the same grouping with reductions, softmax and "
    "normalizations fusible too.",
    "Batch norm in inference is pointwise (per-channel scale and shift).",
    "Memory SoL uses the fused (pointwise) bytes; bandwidth is the datasheet peak; no cache modelling.",
    "SoL = max(compute SoL, memory SoL): compute and memory traffic overlap perfectly; kernel launch overhead, "
    "latency and occupancy are not modelled. Peaks are dense datasheet figures (no structured sparsity).",
    "Per-operator and per-layer rows: intensity, memory SoL and bound use the row's unfused bytes (each kernel on "
    "its own, as eager runs it); the row's hbm_bytes_fused is its share of the fused estimate (a group's boundary "
    "reads charged to the kernel that reads them, its boundary writes to the kernel that writes them). The totals' "
    "intensity, memory SoL and bottleneck use the fused bytes.",
    "A Python scalar operand that PyTorch wraps into a 0-dim tensor (x * 2) is read as one element.",
    "Compute SoL: matmul/conv/attention FLOPs at the tensor-core peak of the precision, all other FLOPs at the "
    "non-tensor-core peak; FLOPs are the operator view's (torchscan_flops_v1) and do not depend on precision.",
    "Precision sets the bytes of every floating tensor; integer and boolean tensors keep their recorded size.",
]


def roofline(workload_or_module, inputs=None, *, gpu="h100-sxm", precision: str = "fp32",
             actual_ms: Optional[float] = None) -> RooflineReport:
    """Roofline of one forward (an nn.Module with `inputs`, run under no_grad)
    or of a zero-argument callable, on `gpu` at `precision`. Works on `meta`
    tensors: only metadata is recorded."""
    if precision not in PRECISIONS:
        raise ValueError(f"torchscan.roofline: precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if actual_ms is not None and (isinstance(actual_ms, bool) or not isinstance(actual_ms, (int, float))
                                  or not actual_ms > 0 or not math.isfinite(actual_ms)):
        raise ValueError(f"torchscan.roofline: actual_ms must be a positive number of milliseconds, got {actual_ms!r}")
    spec = gpu_spec(gpu)
    matrix_peak, vector_peak, peak_notes = _peaks(spec, precision)
    bw = spec["memory_bandwidth"] * 1e9
    bpe = PRECISIONS[precision]
    traffic, module = _scan(workload_or_module, inputs)
    kernels = traffic["kernels"]
    peaks = (matrix_peak, vector_peak)

    def flops_of(k):
        return int(k["flops"])

    diagnostics = []
    unknown: Dict[str, Any] = {}
    for k in kernels:
        if k["flops_status"] != "complete":
            unknown.setdefault(k["op"], [0, k["flops_status"]])[0] += 1
    for op, (calls, status) in sorted(unknown.items()):
        diagnostics.append({"code": "flops_incomplete", "operator": op, "calls": calls,
                            "message": f"{op} ran {calls} time(s) with {status} FLOPs; total FLOPs and compute SoL "
                                       "are lower bounds"})

    def totals_of(ks):
        flops = sum(flops_of(k) for k in ks)
        matrix = sum(flops_of(k) for k in ks if k["class"] == "matmul")
        read = sum(_bytes(k["read"], bpe) for k in ks)
        written = sum(_bytes(k["written"], bpe) for k in ks)
        fused = sum(_bytes(k["fused_read"], bpe) + _bytes(k["fused_written"], bpe) for k in ks)
        fused_r = sum(_bytes(k["fused_reductions_read"], bpe) + _bytes(k["fused_reductions_written"], bpe)
                      for k in ks)
        return flops, matrix, read, written, fused, fused_r

    flops, matrix_flops, read, written, fused, fused_r = totals_of(kernels)
    unfused = read + written
    compute_s = matrix_flops / matrix_peak + (flops - matrix_flops) / vector_peak
    memory_s = fused / bw
    sol_s = max(compute_s, memory_s)
    params = None
    if module is not None:
        seen = {}
        for p in module.parameters():
            seen[id(p)] = p.numel()
        params = sum(seen.values())
    totals = {
        "flops": flops,
        "flops_status": "complete" if not unknown else "partial",
        "flops_matmul": matrix_flops,
        "flops_other": flops - matrix_flops,
        "parameters": params,
        "hbm_bytes_unfused": unfused,
        "hbm_bytes_fused": fused,
        "hbm_bytes_fused_reductions": fused_r,
        "fusion_reduction": 1 - fused / unfused if unfused else 0.0,
        "fusion_reduction_with_reductions": 1 - fused_r / unfused if unfused else 0.0,
        "arithmetic_intensity": flops / fused if fused else None,
        "arithmetic_intensity_unfused": flops / unfused if unfused else None,
        "ridge_point": matrix_peak / bw,
        "ridge_point_vector": vector_peak / bw,
        "compute_sol_ms": compute_s * 1e3,
        "memory_sol_ms": memory_s * 1e3,
        "memory_sol_unfused_ms": unfused / bw * 1e3,
        "memory_sol_fused_reductions_ms": fused_r / bw * 1e3,
        "sol_ms": sol_s * 1e3,
        "bottleneck": _bound(compute_s, memory_s),
        "kernels": len(kernels),
        "fused_kernels": traffic["groups"],
        "fused_kernels_reductions": traffic["groups_reductions"],
    }
    if actual_ms is not None:
        totals["actual_ms"] = float(actual_ms)
        totals["achieved_fraction_of_sol"] = sol_s * 1e3 / actual_ms

    # Per operator (packet) and per layer call (a scope and every scope inside it).
    by_op: Dict[str, Any] = {}
    for k in kernels:
        by_op.setdefault(k["op"], []).append(k)
    operators = []
    for op, ks in sorted(by_op.items()):
        f, m, r, w, fu, _ = totals_of(ks)
        row = {"operator": op, "class": ks[0]["class"], "calls": len(ks)}
        row.update(_row(f, r, w, fu, m, peaks, bw))
        operators.append(row)
    operators.sort(key=lambda r: -max(r["compute_sol_ms"], r["memory_sol_ms"]))

    scopes = traffic["scopes"]
    types: Dict[str, str] = {}
    if module is not None:
        for name, m in module.named_modules():
            types.setdefault(name or module.__class__.__name__, type(m).__name__)
    members: list = [[] for _ in scopes]
    for k in kernels:
        s = k["scope"]
        while s is not None and s >= 0:
            members[s].append(k)
            s = scopes[s]["parent"]
    layers = []
    for i, sc in enumerate(scopes):
        depth, p = 0, sc["parent"]
        while p >= 0:
            depth, p = depth + 1, scopes[p]["parent"]
        f, m, r, w, fu, _ = totals_of(members[i])
        row = {"path": sc["path"], "module_type": types.get(sc["path"]), "call_index": sc["call_index"],
               "depth": depth, "kernels": len(members[i])}
        row.update(_row(f, r, w, fu, m, peaks, bw))
        layers.append(row)

    context = {
        "kind": "torchscan_roofline",
        "torch_version": torch.__version__.split("+")[0],
        "gpu": {k: spec.get(k) for k in ("key", "name", "vendor", "memory_bandwidth", "source", "uncertain")},
        "precision": precision,
        "bytes_per_float_element": bpe,
        "peak_matmul_tflops": matrix_peak / 1e12,
        "peak_vector_tflops": vector_peak / 1e12,
        "memory_bandwidth_gbps": spec["memory_bandwidth"],
        "mode": "forward under torch.no_grad()" if module is not None else "the callable as it runs",
        "assumptions": _ASSUMPTIONS + [_OUTPUTS_KNOWN if traffic.get("outputs_known") else _OUTPUTS_UNKNOWN]
        + peak_notes,
    }
    return RooflineReport(schema_version=SCHEMA_VERSION, context=context, totals=totals, operators=operators,
                          layers=layers, diagnostics=diagnostics)


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def render_roofline(report: Mapping) -> str:
    """Text of a RooflineReport; a dict that is not one is a TypeError/ValueError naming the field."""
    validate_roofline_report(report, "torchscan.render_roofline")
    t, c = report["totals"], report["context"]
    bar = "=" * 64
    lines = [bar, f"  torchscan roofline - {c['gpu']['name']}   precision: {c['precision']}", bar,
             f"  FLOPs                 : {t['flops']:,} ({_si(t['flops'], 'FLOPs')})"
             + ("" if t["flops_status"] == "complete" else "  [partial: lower bound]")]
    if t.get("parameters") is not None:
        lines.append(f"  Parameters            : {t['parameters']:,}")
    lines += [
        "",
        f"  HBM traffic (unfused) : {t['hbm_bytes_unfused']:,} B ({_si(t['hbm_bytes_unfused'], 'B')})  <- eager upper bound",
        f"  HBM traffic (fused)   : {t['hbm_bytes_fused']:,} B ({_si(t['hbm_bytes_fused'], 'B')})  <- pointwise fusion",
        f"  ... with reductions   : {t['hbm_bytes_fused_reductions']:,} B",
        f"  Fusion reduction      : {100 * t['fusion_reduction']:.1f} %",
        "",
        "  Arithmetic intensity  : " + (f"{t['arithmetic_intensity']:.3g} FLOPs/Byte"
                                          if t["arithmetic_intensity"] is not None else "n/a (no bytes moved)"),
        f"  Ridge point ({c['precision']:>4})    : {t['ridge_point']:.1f} FLOPs/Byte",
        "",
        f"  Compute SoL : {t['compute_sol_ms']:.4g} ms",
        f"  Memory  SoL : {t['memory_sol_ms']:.4g} ms",
        f"  *** Bottleneck : {t['bottleneck'].upper()} BOUND ***" if t["bottleneck"] != "none"
        else "  *** Bottleneck : none (no FLOPs, no bytes) ***",
    ]
    if "achieved_fraction_of_sol" in t:
        lines.append(f"  Achieved : {100 * t['achieved_fraction_of_sol']:.1f} % of SoL ({t['actual_ms']} ms measured)")
    lines.append(bar)
    return "\n".join(lines)


# ---- SVG plot (no plotting dependency).

def compare_kernelbench(ref_ms: float, gen_ms: float, report: Mapping) -> dict:
    """Two measured implementations of the same workload against its SoL bound."""
    for name, v in (("ref_ms", ref_ms), ("gen_ms", gen_ms)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or not math.isfinite(v):
            raise ValueError(f"torchscan.compare_kernelbench: {name} must be a positive number of ms, got {v!r}")
    validate_roofline_report(report, "torchscan.compare_kernelbench")
    sol = report["totals"]["sol_ms"]
    return {"sol_ms": sol, "ref_ms": float(ref_ms), "gen_ms": float(gen_ms),
            "ref_fraction_of_sol": sol / ref_ms, "gen_fraction_of_sol": sol / gen_ms, "speedup": ref_ms / gen_ms}
