#!/usr/bin/env python3
"""TorchScan overhead benchmark.

Every figure printed comes from this one run; the script reports ratios and
differences measured side by side, never compares against stored timings and
asserts nothing about speed.

  a. Per-operator interception overhead: N calls of ``torch.add(a, b)`` on
     4-element CPU tensors, unscanned, under ``torchscan.scan()`` and under
     ``torch.utils.flop_counter.FlopCounterMode(display=False)``.  Reports the
     median over repeats of ns per call for each arm, the ns each mode adds per
     call, and how many times more FlopCounterMode adds than TorchScan.
  b. End-to-end scanned/unscanned time ratios for ResNet-50 at batch 1
     (1x3x224x224) and for one TinyDecoder decoding step (after a prefill),
     eval + no_grad, with FlopCounterMode's ratio for the same workloads.
  f. Memory per call: 10^6 calls of ``torch.add`` in one full scan and in one
     streaming scan, each in a fresh process: resident-memory growth per call,
     calls still held, and the time to build the reports.
  d. Module analysis: ``torchscan.crawl_module`` (the whole call, report
     included) over a plain eval/no_grad forward, on MobileNetV3-Small and
     EfficientNet-B0 (many small modules; tests/fixtures/models.py) at batch 1,
     1x3x224x224, with ``measure_flops`` and FlopCounterMode for reference.

  g. Per-call cost by operator kind: torch.add, F.linear, F.conv2d,
     F.layer_norm, F.embedding and F.scaled_dot_product_attention on small
     CPU tensors: ns per call unscanned, and what scan(), an empty
     TorchDispatchMode and FlopCounterMode add (and TorchScan's addition over
     the empty mode's).
  h. Module analysis against its floor and its peers, one interleaved run
     per model (MobileNetV3-Small, EfficientNet-B0, a tiny BERT and a Llama
     decode step with a KV cache, all built from code): a plain forward, the
     floor (measure_flops with empty pre/post hooks on every module),
     crawl_module, summary, FlopCounterMode (module-tracking), and ptflops'
     aten backend, fvcore, thop and torchinfo where importable
     (--install-peers VENV installs them into a throwaway venv first).
  i. Streaming: torch.add's per-call cost in a full and a streaming scan.
The machine's load average (os.getloadavg) is printed with each of g-i.

Arm order rotates through every permutation across repeats (so each arm runs
first, middle and last equally often) to limit drift; each scanned sample uses
a fresh scan.  Reports (``s.report()`` / ``get_total_flops()``) are built once
per arm outside the timed region.

Usage:
  python3 tools/benchmark.py                 # full run (a few minutes on 2 cores)
  python3 tools/benchmark.py --quick         # smoke test (< 60 s)
  python3 tools/benchmark.py --json out.json # also write every figure as JSON
  python3 tools/benchmark.py --only gh --install-peers /tmp/peers   # parts g and h, peers included
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from benchmark_common import (FCM, REPO, TORCHSCAN, TRACE, UNSCANNED, _arm_orders, _fmt_ratio,  # noqa: E402
                              _gc_paused, _median, ns)
from benchmark_peers import (_load, _peers_python, _print_module_analysis, _print_op_kinds,  # noqa: E402
                             _print_streaming, bench_module_analysis, bench_op_kinds, bench_streaming_calls)


# --------------------------------------------------------------------------- #
# Environment
# --------------------------------------------------------------------------- #


def _import_torchscan():
    """Import the in-repo ``torchscan`` shim; return (module, None) or (None, why)."""
    shim = REPO / "python_shim"
    if (shim / "torchscan" / "__init__.py").exists() and str(shim) not in sys.path:
        sys.path.insert(0, str(shim))
    try:
        import torchscan  # type: ignore
    except Exception as e:  # noqa: BLE001 - report any load failure, keep benchmarking
        return None, f"{type(e).__name__}: {e}"
    if not hasattr(torchscan, "scan"):
        return None, "torchscan has no scan()"
    return torchscan, None


def _import_models():
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.fixtures import models  # noqa: WPS433
    return models


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def machine_info() -> Dict[str, Any]:
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {
        "processor": platform.processor(),
        "cpu_model": _cpu_model_name(),
        "machine": platform.machine(),
        "system": platform.system(),
        "release": platform.release(),
        "nproc": affinity if affinity is not None else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


class Arms:
    """Context factories for the three arms."""

    def __init__(self, torchscan_mod) -> None:
        self.ts = torchscan_mod
        self.names = [UNSCANNED] + ([TORCHSCAN] if torchscan_mod else []) + [FCM]

    def ctx(self, arm: str):
        if arm == UNSCANNED:
            return contextlib.nullcontext()
        if arm == TORCHSCAN:
            return self.ts.scan()
        if arm == TRACE:
            return self.ts.scan(trace=True)
        if arm == FCM:
            return FlopCounterMode(display=False)
        raise KeyError(arm)


def _summarize_flops(arm: str, handle) -> Dict[str, Any]:
    """Build the arm's report once (outside timing) and extract a FLOP total."""
    t0 = ns()
    if arm in (TORCHSCAN, TRACE):
        rep = handle.report()
        build_ms = (ns() - t0) / 1e6
        total = rep.get("total", {}) if isinstance(rep, dict) else {}
        if not isinstance(total, dict):
            total = {"value": total}
        return {
            "report_build_ms": build_ms,
            "status": total.get("status"),
            "value": total.get("value"),
            "known_value": total.get("known_value", total.get("value")),
            "report_keys": sorted(rep.keys()) if isinstance(rep, dict) else None,
        }
    if arm == FCM:
        total = handle.get_total_flops()
        # FlopCounterMode has no completeness notion: it sums known formulas.
        return {"report_build_ms": (ns() - t0) / 1e6, "status": "no-status",
                "value": int(total), "known_value": int(total)}
    return {}


def _count_dispatch_ops(fn: Callable[[], Any]) -> Optional[int]:
    """ATen calls seen by an empty TorchDispatchMode (below autograd; for scale)."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return None

    class _Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            _Count.n += 1
            return func(*args, **(kwargs or {}))

    with _Count():
        fn()
    return _Count.n


# --------------------------------------------------------------------------- #
# a. per-operator overhead
# --------------------------------------------------------------------------- #


def bench_per_op(arms: Arms, n_calls: int, repeats: int) -> Dict[str, Any]:
    a = torch.ones(4)
    b = torch.ones(4)
    add = torch.add
    loop = range(n_calls)
    names = arms.names + ([TRACE] if arms.ts else [])

    def one(arm: str):
        with _gc_paused():
            with arms.ctx(arm) as handle:
                t0 = ns()
                for _ in loop:
                    add(a, b)
                t1 = ns()
        return (t1 - t0) / n_calls, handle

    # warm-up (small) and one report per scanned arm, outside timing
    reports: Dict[str, Any] = {}
    for arm in names:
        with arms.ctx(arm) as h:
            for _ in range(min(n_calls, 2000)):
                add(a, b)
        if arm != UNSCANNED:
            reports[arm] = _summarize_flops(arm, h)

    samples: Dict[str, List[float]] = {arm: [] for arm in names}
    orders = _arm_orders(names)
    full_report_done = False
    for r in range(repeats):
        for arm in orders[r % len(orders)]:
            per_call, h = one(arm)
            samples[arm].append(per_call)
            if arm == TORCHSCAN and not full_report_done:
                # a report over a full N-call scan, outside timing
                reports[arm + "_full_scan"] = _summarize_flops(arm, h)
                full_report_done = True
            del h

    med = {arm: _median(v) for arm, v in samples.items()}
    added: Dict[str, Optional[float]] = {}
    added_paired: Dict[str, Optional[float]] = {}
    for arm in names:
        if arm == UNSCANNED:
            continue
        added[arm] = med[arm] - med[UNSCANNED]
        added_paired[arm] = _median([x - y for x, y in zip(samples[arm], samples[UNSCANNED])])
    ratio = None
    if TORCHSCAN in added and added[TORCHSCAN] and added[TORCHSCAN] > 0:
        ratio = added[FCM] / added[TORCHSCAN]
    return {
        "op": "torch.add(a, b), a and b float32[4] on CPU",
        "n_calls": n_calls,
        "repeats": repeats,
        "ns_per_call": med,
        "added_ns_per_call": added,
        "added_ns_per_call_paired_median": added_paired,
        "ratio_fcm_added_over_torchscan_added": ratio,
        "samples_ns_per_call": samples,
        "reports": reports,
    }


# --------------------------------------------------------------------------- #
# b. end-to-end
# --------------------------------------------------------------------------- #


def bench_workload(arms: Arms, name: str, desc: str, fn: Callable[[], Any],
                   repeats: int, warmup: int) -> Dict[str, Any]:
    def one(arm: str):
        with _gc_paused():
            t0 = ns()
            with arms.ctx(arm) as handle:
                t1 = ns()
                fn()
                t2 = ns()
            t3 = ns()
        return t3 - t0, t2 - t1, handle

    reports: Dict[str, Any] = {}
    for arm in arms.names:
        for i in range(warmup):
            _, _, h = one(arm)
            if i == 0 and arm != UNSCANNED:
                reports[arm] = _summarize_flops(arm, h)
            del h

    whole: Dict[str, List[int]] = {arm: [] for arm in arms.names}
    inner: Dict[str, List[int]] = {arm: [] for arm in arms.names}
    orders = _arm_orders(arms.names)
    for r in range(repeats):
        for arm in orders[r % len(orders)]:
            w, i, h = one(arm)
            del h
            whole[arm].append(w)
            inner[arm].append(i)

    med_whole = {arm: _median(v) for arm, v in whole.items()}
    med_inner = {arm: _median(v) for arm, v in inner.items()}
    ratio = {}
    ratio_paired = {}
    ratio_inner = {}
    for arm in arms.names:
        if arm == UNSCANNED:
            continue
        ratio[arm] = med_whole[arm] / med_whole[UNSCANNED]
        ratio_paired[arm] = _median([x / y for x, y in zip(whole[arm], whole[UNSCANNED])])
        ratio_inner[arm] = med_inner[arm] / med_inner[UNSCANNED]
    ops = _count_dispatch_ops(fn)
    added_per_op = None
    if ops:
        added_per_op = {arm: (med_whole[arm] - med_whole[UNSCANNED]) / ops
                        for arm in arms.names if arm != UNSCANNED}
    return {
        "workload": name,
        "description": desc,
        "repeats": repeats,
        "warmup": warmup,
        "median_ms": {arm: v / 1e6 for arm, v in med_whole.items()},
        "median_ms_inside_context": {arm: v / 1e6 for arm, v in med_inner.items()},
        "ratio_vs_unscanned": ratio,
        "ratio_vs_unscanned_paired_median": ratio_paired,
        "ratio_vs_unscanned_inside_context": ratio_inner,
        "aten_ops_seen_by_torch_dispatch_mode": ops,
        "added_ns_per_dispatch_mode_op": added_per_op,
        "samples_ms": {arm: [x / 1e6 for x in v] for arm, v in whole.items()},
        "reports": reports,
    }


# --------------------------------------------------------------------------- #
# d. module analysis (crawl_module)
# --------------------------------------------------------------------------- #


def bench_crawl(ts, models, repeats: int, warmup: int) -> Dict[str, Any]:
    """crawl_module time / plain forward time, per model: medians of `repeats`
    interleaved samples (arm order rotating). Python's GC stays enabled, as in
    real use (crawl_module's per-layer metadata is part of its cost); a
    gc.collect() before each sample starts every arm from the same heap."""
    out: Dict[str, Any] = {}
    for name, build in (("mobilenet_v3_small", models.mobilenet_v3_small),
                        ("efficientnet_b0", models.efficientnet_b0)):
        torch.manual_seed(0)
        model = build().eval()
        x = torch.rand(1, 3, 224, 224)

        def plain():
            with torch.no_grad():
                model(x)

        def fcm():
            with torch.no_grad(), FlopCounterMode(display=False):
                model(x)

        def measure():
            with torch.no_grad():
                ts.measure_flops(lambda: model(x))

        def scan_memory():
            with torch.no_grad(), ts.scan(memory=True) as s:
                model(x)
            s.report(), s.memory_report()

        # Memory attribution's cost: the same two analyses with it on.
        fns = {UNSCANNED: plain, "crawl_module": lambda: ts.crawl_module(model, args=(x,)),
               "crawl_module_memory": lambda: ts.crawl_module(model, args=(x,), memory=True),
               "measure_flops": measure, "scan_memory": scan_memory, FCM: fcm}
        samples: Dict[str, List[int]] = {arm: [] for arm in fns}
        for arm, fn in fns.items():
            for _ in range(warmup):
                fn()
        orders = _arm_orders(list(fns))
        for r in range(repeats):
            for arm in orders[r % len(orders)]:
                gc.collect()
                t0 = ns()
                fns[arm]()
                samples[arm].append(ns() - t0)
        med = {arm: _median(v) for arm, v in samples.items()}
        out[name] = {
            "modules": sum(1 for _ in model.modules()),
            "median_ms": {arm: v / 1e6 for arm, v in med.items()},
            "ratio_vs_unscanned": {arm: med[arm] / med[UNSCANNED] for arm in fns if arm != UNSCANNED},
            "samples_ms": {arm: [t / 1e6 for t in v] for arm, v in samples.items()},
        }
    return out


# --------------------------------------------------------------------------- #
# e. a 70B-class model on meta
# --------------------------------------------------------------------------- #


def bench_meta_70b(ts) -> Dict[str, Any]:
    """measure_flops and crawl_module of a Llama-2-70B-shaped transformers
    config (80 layers, width 8192, 64 heads / 8 KV heads) on meta, 16 tokens:
    wall time, and the process's peak RSS growth over the model's own."""
    import resource

    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32000, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                         num_attention_heads=64, num_key_value_heads=8)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    ids = torch.zeros(1, 16, dtype=torch.long, device="meta")
    out: Dict[str, Any] = {"parameters": sum(p.numel() for p in model.parameters())}
    for name, fn in (("measure_flops", lambda: ts.measure_flops(lambda: model(input_ids=ids))),
                     ("crawl_module", lambda: ts.crawl_module(model, kwargs={"input_ids": ids}))):
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = ns()
        report = fn()
        seconds = (ns() - t0) / 1e9
        total = report["total"] if name == "measure_flops" else report["totals"]["operator_flops"]
        out[name] = {"seconds": seconds, "status": total["status"],
                     "peak_rss_growth_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024}
    return out


# --------------------------------------------------------------------------- #
# f. memory per call: full and streaming scans of 10^6 calls
# --------------------------------------------------------------------------- #

_SCALE_CHILD = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[3])
import torchscan
from torchscan.flops import FlopScan

def rss():  # resident bytes now (VmRSS), not the high-water mark
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

n, streaming = int(sys.argv[1]), sys.argv[2] == "streaming"
a, b = torch.ones(4), torch.ones(4)
for _ in range(1000):  # warm-up: the allocator's and the dispatcher's caches
    torch.add(a, b)
s = FlopScan(streaming=streaming)
with s:
    torch.add(a, b)
s.report()
before = rss()
s = FlopScan(streaming=streaming)
with s:
    for _ in range(n):
        torch.add(a, b)
during = rss()
held = s._session.held_calls()
t0 = time.perf_counter()
report = s.report()
flop_s = time.perf_counter() - t0
t0 = time.perf_counter()
scan = s.scan_report()
scan_s = time.perf_counter() - t0
assert report["by_operator"]["aten.add"] == 4 * n, report
print(json.dumps({"calls": s._session.recorded_calls(), "held_calls": held, "rss_growth_bytes": during - before,
                  "flop_report_s": flop_s, "scan_report_s": scan_s}))
"""


def bench_scale(n_calls: int) -> Dict[str, Any]:
    """n_calls of torch.add(a, b) on two 4-element tensors in one scan, full and
    streaming, each in a fresh process: the resident memory the scan grew by
    while it ran (divided by the calls: bytes per call), the calls still
    held, and the time to build its FlopReport and its scan report."""
    import subprocess

    out: Dict[str, Any] = {"calls": n_calls}
    for mode in ("full", "streaming"):
        proc = subprocess.run([sys.executable, "-c", _SCALE_CHILD, str(n_calls), mode, str(REPO / "python_shim")],
                              capture_output=True, text=True, check=True)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        r["bytes_per_call"] = r["rss_growth_bytes"] / n_calls
        out[mode] = r
    return out


# --------------------------------------------------------------------------- #
# main
# --------------------------------------------------------------------------- #


def _fmt_flops(rep: Dict[str, Any]) -> str:
    if not rep:
        return ""
    kv = rep.get("known_value")
    kv_s = f"{kv:,}" if isinstance(kv, (int, float)) else str(kv)
    return f"{rep.get('status')} {kv_s} FLOPs (report built in {rep['report_build_ms']:.1f} ms)"


def bench_serving(requests: int, workers: int, repeats: int) -> Dict[str, Any]:
    """Part c (tools/benchmark_serving.py, beside the serving scale and soak figures)."""
    if str(REPO / "tools") not in sys.path:
        sys.path.insert(0, str(REPO / "tools"))
    import benchmark_serving  # noqa: WPS433

    return benchmark_serving.bench_serving(requests, workers, repeats)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small N and repeats (smoke test)")
    p.add_argument("--json", metavar="PATH", help="write all figures as JSON")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    p.add_argument("--n-calls", type=int, help="calls per sample for the per-op test "
                   "(default 200000; 20000 with --quick)")
    p.add_argument("--op-repeats", type=int, help="repeats for the per-op test (default 7; 3)")
    p.add_argument("--resnet-repeats", type=int, help="ResNet-50 repeats (default 15; 3)")
    p.add_argument("--decoder-repeats", type=int, help="decoder-step repeats (default 101; 12)")
    p.add_argument("--prefill", type=int, default=32, help="decoder prompt length (default 32)")
    p.add_argument("--skip-e2e", action="store_true", help="only run the per-op test")
    p.add_argument("--crawl-repeats", type=int, help="crawl_module samples per arm and model (default 15; 3)")
    p.add_argument("--skip-crawl", action="store_true", help="skip the crawl_module test")
    p.add_argument("--skip-meta", action="store_true", help="skip the 70B-on-meta scan (part e)")
    p.add_argument("--serving-requests", type=int, help="requests per example-server run (default 2000; 200)")
    p.add_argument("--skip-serving", action="store_true", help="skip the example-server test")
    p.add_argument("--skip-scale", action="store_true", help="skip the memory-per-call test (part f)")
    p.add_argument("--scale-calls", type=int, help="calls per scan in part f (default 1000000; 100000)")
    p.add_argument("--no-torchscan", action="store_true", help="skip the torchscan arms")
    p.add_argument("--op-kind-calls", type=int, help="calls per sample in part g (default 20000; 2000)")
    p.add_argument("--module-repeats", type=int, help="samples per arm and model in part h (default 9; 3)")
    p.add_argument("--only", metavar="PARTS", help="run only these parts, e.g. 'ghi' (letters as above)")
    p.add_argument("--install-peers", metavar="VENV", help="create VENV (a throwaway venv that sees this "
                   "interpreter's packages), pip-install ptflops, fvcore, thop and torchinfo into it, and run "
                   "the benchmark with its python, so that part h measures them")
    args = p.parse_args(argv)
    if args.install_peers:
        import subprocess

        py = _peers_python(args.install_peers)
        rest = list(sys.argv[1:] if argv is None else argv)
        i = rest.index("--install-peers")
        del rest[i:i + 2]
        return subprocess.run([py, str(Path(__file__).resolve()), *rest]).returncode
    if args.only:
        only = set(args.only)
        args.skip_e2e = args.skip_e2e or "b" not in only
        args.skip_crawl = args.skip_crawl or "d" not in only
        args.skip_meta = args.skip_meta or "e" not in only
        args.skip_scale = args.skip_scale or "f" not in only
        args.skip_serving = args.skip_serving or "c" not in only
    run_part = (lambda part: not args.only or part in args.only)

    q = args.quick
    n_calls = args.n_calls or (20_000 if q else 200_000)
    op_repeats = args.op_repeats or (3 if q else 7)
    resnet_repeats = args.resnet_repeats or (3 if q else 15)
    decoder_repeats = args.decoder_repeats or (12 if q else 101)
    warmup = 1 if q else 2

    torch.set_num_threads(args.threads)
    with contextlib.suppress(RuntimeError):
        torch.set_num_interop_threads(1)
    torch.manual_seed(0)

    ts, why = (None, "disabled by --no-torchscan") if args.no_torchscan else _import_torchscan()
    arms = Arms(ts)
    mach = machine_info()
    t_start = time.perf_counter()

    print("TorchScan benchmark" + (" (--quick)" if q else ""))
    print(f"  torch        {torch.__version__}  ({torch.__file__})")
    if ts is not None:
        print(f"  torchscan    {getattr(ts, '__version__', '?')}  ({ts.__file__})")
    else:
        print(f"  torchscan    NOT AVAILABLE -> torchscan arms skipped ({why})")
    print(f"  threads      torch.get_num_threads()={torch.get_num_threads()}, "
          f"interop={torch.get_num_interop_threads()}")
    print(f"  machine      processor={mach['processor']!r} cpu={mach['cpu_model']!r} "
          f"nproc={mach['nproc']} ({mach['system']} {mach['release']}, Python {mach['python']})")
    print()

    result: Dict[str, Any] = {
        "schema": "torchscan-benchmark/1",
        "torch_version": torch.__version__,
        "torchscan_version": getattr(ts, "__version__", None) if ts else None,
        "torchscan_available": ts is not None,
        "torchscan_unavailable_reason": why,
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "machine": mach,
        "quick": q,
        "config": {"n_calls": n_calls, "op_repeats": op_repeats,
                   "resnet_repeats": resnet_repeats, "decoder_repeats": decoder_repeats,
                   "warmup": warmup, "prefill": args.prefill},
    }

    print(f"  {_load()} at start")
    print()
    if run_part("g"):
        ok = bench_op_kinds(ts, args.op_kind_calls or (2_000 if q else 20_000), op_repeats)
        result["op_kinds"] = ok
        _print_op_kinds(ok)
        print()
    if run_part("h") and ts is not None:
        ma = bench_module_analysis(ts, _import_models(), args.module_repeats or (3 if q else 9), warmup)
        result["module_analysis"] = ma
        _print_module_analysis(ma)
        print()
    if run_part("i") and ts is not None:
        st = bench_streaming_calls(ts, n_calls, op_repeats)
        result["streaming_calls"] = st
        _print_streaming(st)
        print()

    # ---- a. per-operator ------------------------------------------------- #
    if not run_part("a"):
        per_op = None
    else:
        print(f"[a] per-operator overhead: torch.add on float32[4], N={n_calls:,} calls, "
              f"median of {op_repeats} repeats")
        per_op = bench_per_op(arms, n_calls, op_repeats)
        result["per_op"] = per_op
        for arm in per_op["ns_per_call"]:
            line = f"    {arm:<18} {per_op['ns_per_call'][arm]:9.1f} ns/call"
            if arm != UNSCANNED:
                line += (f"   added {per_op['added_ns_per_call'][arm]:9.1f} ns/call"
                         f" (paired {per_op['added_ns_per_call_paired_median'][arm]:.1f})")
            print(line)
        r = per_op["ratio_fcm_added_over_torchscan_added"]
        if r is not None:
            print(f"    FlopCounterMode adds {r:.1f}x the per-call overhead TorchScan adds")
        for k, rep in per_op["reports"].items():
            print(f"    report[{k}]: {_fmt_flops(rep)}")
        print()

    # ---- b. end-to-end --------------------------------------------------- #
    if not args.skip_e2e:
        models = _import_models()
        e2e: Dict[str, Any] = {}

        resnet = models.resnet50().eval()
        x = torch.randn(1, 3, 224, 224)

        def resnet_fn():
            with torch.no_grad():
                return resnet(x)

        dec = models.TinyDecoder().eval()
        prompt = torch.randint(0, dec.vocab_size, (1, args.prefill))
        with torch.no_grad():
            logits, cache = dec.prefill(prompt)
        tok = logits[:, -1:].argmax(-1)

        def decoder_fn():
            with torch.no_grad():
                return dec.decode_one(tok, cache)

        workloads = [
            ("resnet50_b1", "ResNet-50 forward, 1x3x224x224, eval, no_grad",
             resnet_fn, resnet_repeats),
            ("tiny_decoder_step",
             f"TinyDecoder one-token decode after a {args.prefill}-token prefill "
             "(KV cache), eval, no_grad", decoder_fn, decoder_repeats),
        ]
        from tests.fixtures.training import training_step  # noqa: WPS433 (after _import_models' path)
        workloads += [
            (f"{name}_train_step", f"{label} training step (tests/fixtures/training.py): forward, "
             "cross-entropy, backward, clip_grad_norm_, AdamW (foreach)",
             training_step(name, "adamw", "foreach"), resnet_repeats)
            for name, label in (("resnet50", "ResNet-50, 2x3x32x32, 10 classes,"),
                                ("gpt2", "GPT-2 (2 layers, width 32), 2x8 tokens,"))
        ]
        print("[b] end-to-end scanned/unscanned time ratio "
              "(whole `with` block incl. enter/exit; median over repeats)")
        for name, desc, fn, reps in workloads:
            res = bench_workload(arms, name, desc, fn, reps, warmup)
            e2e[name] = res
            print(f"    {name}: {desc}; {reps} repeats, warm-up {warmup}; "
                  f"{res['aten_ops_seen_by_torch_dispatch_mode']} ATen ops "
                  "(as seen by a TorchDispatchMode)")
            for arm in arms.names:
                line = f"      {arm:<20} {res['median_ms'][arm]:10.3f} ms"
                if arm != UNSCANNED:
                    line += (f"   ratio {_fmt_ratio(res['ratio_vs_unscanned'][arm])}"
                             f" (paired {_fmt_ratio(res['ratio_vs_unscanned_paired_median'][arm])},"
                             f" inside-context {_fmt_ratio(res['ratio_vs_unscanned_inside_context'][arm])})")
                print(line)
            for k, rep in res["reports"].items():
                print(f"      report[{k}]: {_fmt_flops(rep)}")
        result["end_to_end"] = e2e
        print()

    # ---- d. module analysis ---------------------------------------------- #
    if not args.skip_crawl and ts is not None:
        reps = args.crawl_repeats or (3 if q else 15)
        cr = bench_crawl(ts, _import_models(), reps, warmup)
        result["crawl_module"] = cr
        print(f"[d] module analysis: whole call / plain eval+no_grad forward, batch 1, 1x3x224x224; "
              f"median of {reps} interleaved samples, GC enabled")
        for name, res in cr.items():
            print(f"    {name} ({res['modules']} modules): plain forward {res['median_ms'][UNSCANNED]:.2f} ms")
            for arm, ratio in res["ratio_vs_unscanned"].items():
                print(f"      {arm:<20} {res['median_ms'][arm]:10.3f} ms   ratio {_fmt_ratio(ratio)}")
        print()

    # ---- e. 70B on meta -------------------------------------------------- #
    if not args.skip_meta and ts is not None:
        meta = bench_meta_70b(ts)
        result["meta_70b"] = meta
        print(f"[e] Llama-70B-shaped config on meta ({meta['parameters']:,} parameters), 16 tokens")
        for name in ("measure_flops", "crawl_module"):
            m = meta[name]
            print(f"    {name:<14} {m['seconds']:6.2f} s   peak RSS +{m['peak_rss_growth_mib']:.0f} MiB   {m['status']}")
        print()

    # ---- f. memory per call ---------------------------------------------- #
    if not args.skip_scale and ts is not None:
        sc = bench_scale(args.scale_calls or (100_000 if q else 1_000_000))
        result["scale"] = sc
        print(f"[f] memory per call: {sc['calls']:,} calls of torch.add on 4-element tensors in one scan, "
              f"each mode in a fresh process")
        for mode in ("full", "streaming"):
            m = sc[mode]
            print(f"      {mode:<10} RSS +{m['rss_growth_bytes'] / 2**20:7.1f} MiB = {m['bytes_per_call']:6.1f} B/call   "
                  f"held {m['held_calls']:>9,} calls   FlopReport {m['flop_report_s']:.3f} s   "
                  f"scan report {m['scan_report_s']:.3f} s")
        print()

    # ---- c. example server under the attach launcher ------------------------ #
    if not args.skip_serving and not args.no_torchscan:
        workers = os.cpu_count() or 2
        sv = bench_serving(args.serving_requests or (200 if q else 2000), workers, 3 if q else 7)
        result["serving"] = sv
        print(f"[c] example C++ server at full load: {sv['requests']} requests of the example CNN "
              f"(1x3x32x32) on {workers} worker threads; median of {sv['repeats']} interleaved runs")
        print(f"      {'arm':<28} {'serving':>10}     {'ratio':>6}  {'process':>9}  {'peak RSS':>9}")
        for arm, t in sv["median_s"].items():
            ratio = _fmt_ratio(sv["ratio_vs_unattached"][arm]) if arm in sv["ratio_vs_unattached"] else ""
            print(f"      {arm:<28} {t * 1000:7.1f} ms  {ratio:>8}  {sv['median_wall_s'][arm]:7.2f} s  "
                  f"{sv['median_peak_rss_mib'][arm]:5.0f} MiB")
        print(f"      attached exit report (streaming): built in {sv['attached_exit_report_s']:.2f} s "
              f"({sv['held_exit_report_s']:.2f} s holding every call); "
              f"{sv['attached_report_total']['status']} {sv['attached_report_total']['value']:,} FLOPs")
        print(f"      attached_trace / attached_hold_calls: {sv['attached_trace_over_hold_calls']:.3f}x "
              f"(every thread's calls timed; trace of {sv['trace_events']:,} events)")
        print()

    elapsed = time.perf_counter() - t_start
    result["elapsed_s"] = elapsed
    print(f"total benchmark time {elapsed:.1f} s")

    if args.json:
        path = Path(args.json)
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True, default=str)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
