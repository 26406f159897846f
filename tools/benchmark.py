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
     Each sample starts after gc.collect() (cold caches); --warm leaves it
     out (warm caches, as a loop timing one call again and again finds
     them: every arm is faster, the floor most, so the ratios are higher).
  i. Streaming: torch.add's per-call cost in a full and a streaming scan.
The machine's load average (os.getloadavg) is printed with each of g-i.

This file is the command line; the parts live in tools/benchmark_overhead.py
(a, b), benchmark_serving.py (c), benchmark_crawl.py (d, e),
benchmark_scale.py (f) and benchmark_peers.py (g, h, i).

Arm order rotates through every permutation across repeats (so each arm runs
first, middle and last equally often) to limit drift; each scanned sample uses
a fresh scan.  Reports (``s.report()`` / ``get_total_flops()``) are built once
per arm outside the timed region.

Usage:
  python3 tools/benchmark.py                 # full run (a few minutes on 2 cores)
  python3 tools/benchmark.py --quick         # smoke test (< 60 s)
  python3 tools/benchmark.py --json out.json # also write every figure as JSON
  python3 tools/benchmark.py --only gh --install-peers /tmp/peers   # parts g and h, peers included
  python3 tools/benchmark.py --only h --warm                         # part h with warm caches
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import torch  # noqa: E402

from benchmark_common import REPO, _fmt_ratio  # noqa: E402
from benchmark_crawl import _print_crawl, _print_meta_70b, bench_crawl, bench_meta_70b  # noqa: E402
from benchmark_overhead import (Arms, _print_per_op, _print_workload, bench_per_op, bench_workload,  # noqa: E402
                                end_to_end_workloads)
from benchmark_peers import (_load, _peers_python, _print_module_analysis, _print_op_kinds,  # noqa: E402
                             _print_streaming, bench_module_analysis, bench_op_kinds, bench_streaming_calls)
from benchmark_scale import _print_scale, bench_scale  # noqa: E402


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


# --------------------------------------------------------------------------- #
# main
# --------------------------------------------------------------------------- #


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
    p.add_argument("--warm", action="store_true", help="part h without gc.collect() before each sample (the "
                   "caches warm, as a loop timing one call again and again finds them)")
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
        ma = bench_module_analysis(ts, _import_models(), args.module_repeats or (3 if q else 9), warmup,
                                   warm=args.warm)
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
        _print_per_op(per_op)
        print()

    # ---- b. end-to-end --------------------------------------------------- #
    if not args.skip_e2e:
        models = _import_models()
        e2e: Dict[str, Any] = {}

        workloads = end_to_end_workloads(models, args.prefill, resnet_repeats, decoder_repeats)
        print("[b] end-to-end scanned/unscanned time ratio "
              "(whole `with` block incl. enter/exit; median over repeats)")
        for name, desc, fn, reps in workloads:
            res = bench_workload(arms, name, desc, fn, reps, warmup)
            e2e[name] = res
            _print_workload(arms, name, desc, reps, warmup, res)
        result["end_to_end"] = e2e
        print()

    # ---- d. module analysis ---------------------------------------------- #
    if not args.skip_crawl and ts is not None:
        reps = args.crawl_repeats or (3 if q else 15)
        cr = bench_crawl(ts, _import_models(), reps, warmup)
        result["crawl_module"] = cr
        _print_crawl(cr, reps)
        print()

    # ---- e. 70B on meta -------------------------------------------------- #
    if not args.skip_meta and ts is not None:
        meta = bench_meta_70b(ts)
        result["meta_70b"] = meta
        _print_meta_70b(meta)
        print()

    # ---- f. memory per call ---------------------------------------------- #
    if not args.skip_scale and ts is not None:
        sc = bench_scale(args.scale_calls or (100_000 if q else 1_000_000))
        result["scale"] = sc
        _print_scale(sc)
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
