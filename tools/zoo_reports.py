"""Every report of every model-zoo workload, as normalised JSON files: a
behaviour snapshot to compare two builds (or two revisions) with.

    python3 tools/zoo_reports.py --out DIR              # write DIR/<workload>.<kind>.json
    python3 tools/zoo_reports.py --compare DIR_A DIR_B  # print the differences; exit 1 when any

The workloads are tests/fixtures/zoo.py's (its transformers ones included
when transformers imports). Each workload is scanned in every way the Python
API offers: measure_flops (with and without module labels), a scan's scan,
module and memory reports, a streaming scan, the trace, and the roofline
(traffic); a workload that exposes its module is also crawled (crawl_module,
with memory and with a trace, its rendered tables, and the module's
roofline). Values that differ between two runs of the same build are
removed: times, durations, clock-derived figures, process-wide counters.
A trace is kept as its shape: event names, categories and arguments,
nested by containment, without times.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any, Callable, Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

# Keys whose values come from a clock or the process, not from the model.
VOLATILE_KEYS = {"ts", "dur", "time", "times", "timestamp", "elapsed", "elapsed_s", "elapsed_ms", "wall_s",
                 "wall_time", "duration", "duration_ns", "duration_s", "started_at", "date", "pid", "tid",
                 "thread_id", "os_thread_id", "address", "peak_rss", "process_peak_rss", "hostname", "path_on_disk"}


def normalise(value: Any) -> Any:
    """The value with volatile keys dropped and floats rounded (12
    significant digits: formatting noise only, never a changed count)."""
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return repr(value)
        return float(f"{value:.12g}")
    return value


def trace_shape(trace: dict) -> dict:
    """A trace-event document as its shape: per track, the slices nested by
    containment (integer nanoseconds, exact), each with name, category and
    arguments; other events (metadata, flows) by name and arguments, counted."""
    events = trace.get("traceEvents", [])
    tracks: Dict[Any, List[dict]] = {}
    others: List[dict] = []
    counts: Dict[str, int] = {}
    for e in events:
        counts[e.get("ph", "?")] = counts.get(e.get("ph", "?"), 0) + 1
        if e.get("ph") == "X":
            tracks.setdefault((e.get("pid"), e.get("tid")), []).append(e)
        else:
            others.append(normalise({k: v for k, v in e.items() if k not in ("ts", "dur", "id")}))
    shaped = {}
    for (pid, tid), slices in sorted(tracks.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        roots: List[dict] = []
        stack: List[tuple] = []  # (end_ns, node)
        # Emission order is start order; a stable sort by start keeps a parent
        # ahead of a child that starts on the same nanosecond.
        ordered = sorted(slices, key=lambda e: round(e["ts"] * 1000))
        for e in ordered:
            start = round(e["ts"] * 1000)
            end = start + round(e.get("dur", 0) * 1000)
            node = {"name": e.get("name"), "cat": e.get("cat"), "args": normalise(e.get("args", {})), "children": []}
            while stack and not end <= stack[-1][0]:
                stack.pop()
            (stack[-1][1]["children"] if stack else roots).append(node)
            stack.append((end, node))
        shaped[f"pid {pid} tid {tid}"] = {"slices": len(slices), "tree": roots}
    meta = {k: normalise(v) for k, v in trace.items() if k != "traceEvents"}
    return {"event_counts": counts, "tracks": shaped, "other_events": others, "document": meta}


# The roofline's fused estimate (and what is derived from it) of the same
# workload varies from run to run, also within one process: the grouping
# follows tensor identities, and which identities meet depends on where the
# allocator put each tensor. Those figures are replaced by a marker and the
# bound they must keep (fused <= unfused); every unfused figure is kept.
FUSED_TOTALS = {"hbm_bytes_fused", "hbm_bytes_fused_reductions", "fusion_reduction", "fusion_reduction_with_reductions",
                "memory_sol_ms", "memory_sol_fused_reductions_ms", "sol_ms", "arithmetic_intensity", "fused_kernels",
                "fused_kernels_reductions"}
FUSED_LINES = ("HBM traffic (fused)", "... with reductions", "Fusion reduction", "Arithmetic intensity", "Memory  SoL")
VARIES = "<fused estimate: varies run to run>"


def traffic_shape(report: dict, rendered: List[str]) -> dict:
    report = dict(report)
    totals = dict(report.get("totals", {}))
    unfused = totals.get("hbm_bytes_unfused")
    bounds = {"fused_not_above_unfused": totals.get("hbm_bytes_fused", 0) <= unfused if unfused is not None else None,
              "fused_reductions_not_above_fused":
                  totals.get("hbm_bytes_fused_reductions", 0) <= totals.get("hbm_bytes_fused", 0)}
    for key in FUSED_TOTALS & set(totals):
        totals[key] = VARIES
    report["totals"] = totals
    for rows in ("operators", "layers"):
        if isinstance(report.get(rows), list):
            report[rows] = [{**row, "hbm_bytes_fused": VARIES} if "hbm_bytes_fused" in row else row
                            for row in report[rows]]
    lines = [line.split(":")[0] + ": " + VARIES if line.strip().startswith(FUSED_LINES) else line for line in rendered]
    return {"report": report, "rendered": lines, "bounds": bounds}


def _summary_table(text: str) -> List[str]:
    return text.splitlines()


def _kinds_of_callable(workload: Callable[[], None]) -> Dict[str, Callable[[], Any]]:
    import torchscan

    def scanned(**options):
        with torchscan.scan(**options) as s:
            workload()
        return s

    def scan_reports():
        s = scanned(modules=True)
        return {"scan_report": s.scan_report(), "module_report": s.module_report(), "flop_report": s.report()}

    def streaming():
        s = scanned(streaming=True)
        return {"scan_report": s.scan_report(), "module_report": s.module_report(), "flop_report": s.report()}

    def memory():
        s = scanned(memory=True)
        return {"memory_report": s.memory_report(), "scan_report": s.scan_report()}

    def traffic():
        report = torchscan.roofline(workload, gpu="h100-sxm", precision="fp32")
        return traffic_shape(report, report.render().splitlines())

    return {
        "measure_flops": lambda: torchscan.measure_flops(workload),
        "measure_flops_modules": lambda: torchscan.measure_flops(workload, modules=True),
        "scan": scan_reports,
        "streaming": streaming,
        "memory": memory,
        "trace": lambda: trace_shape(scanned(trace=True).trace()),
        "traffic": traffic,
    }


def _kinds_of_module(module, args: tuple, kwargs: dict) -> Dict[str, Callable[[], Any]]:
    import torchscan

    def crawl(**options):
        return torchscan.crawl_module(module, args=args, kwargs=kwargs, **options)

    def tables():
        report = crawl()
        return {"full": _summary_table(torchscan.render_report(report)),
                "depth_1": _summary_table(torchscan.render_report(report, max_depth=1)),
                "receptive_field": _summary_table(torchscan.render_report(report, receptive_field=True))}

    def crawl_trace():
        report = crawl(trace=True)
        shape = trace_shape(report.pop("trace"))
        return {"report": report, "trace": shape}

    def roofline():
        inputs = dict(kwargs) if kwargs else tuple(args)
        report = torchscan.roofline(module, inputs, gpu="h100-sxm", precision="fp32")
        return traffic_shape(report, report.render().splitlines())

    return {
        "crawl_module": crawl,
        "crawl_module_memory": lambda: crawl(memory=True),
        "crawl_module_structure": lambda: crawl(mode="structure"),
        "crawl_module_trace": crawl_trace,
        "summary_tables": tables,
        "module_roofline": roofline,
    }


def _workloads() -> Dict[str, Callable[[], None]]:
    import tests.fixtures.zoo as zoo

    try:
        import transformers  # noqa: F401
    except ImportError:
        # zoo.workloads() builds its transformers models unconditionally.
        zoo._transformers_workloads = lambda: {}  # type: ignore[attr-defined]
    return zoo.workloads()


def write(out: str, only: List[str]) -> int:
    import torch

    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)  # intra-op threads must not change what one scan sees
    started = time.monotonic()
    workloads = _workloads()
    written = 0
    for name, workload in workloads.items():
        if only and name not in only:
            continue
        kinds = _kinds_of_callable(workload)
        module = getattr(workload, "module", None)
        if module is not None:
            kinds.update(_kinds_of_module(module, tuple(workload.args), dict(workload.kwargs)))
        t0 = time.monotonic()
        for kind, produce in kinds.items():
            torch.manual_seed(0)
            try:
                value = normalise(produce())
            except Exception as e:  # a failure is part of the behaviour: recorded, not fatal
                value = {"error": type(e).__name__, "message": str(e).splitlines()[:1]}
            with open(os.path.join(out, f"{name}.{kind}.json"), "w") as f:
                json.dump(value, f, indent=1, sort_keys=True)
                f.write("\n")
            written += 1
        print(f"{name}: {len(kinds)} reports, {time.monotonic() - t0:.1f} s", flush=True)
    print(f"{written} files in {out} ({time.monotonic() - started:.0f} s)")
    return 0


def _differences(a: Any, b: Any, where: str, out: List[str], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(f"{where}.{k}: only in B: {json.dumps(b[k])[:200]}")
            elif k not in b:
                out.append(f"{where}.{k}: only in A: {json.dumps(a[k])[:200]}")
            else:
                _differences(a[k], b[k], f"{where}.{k}", out, limit)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{where}: length {len(a)} != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            _differences(x, y, f"{where}[{i}]", out, limit)
    elif a != b or type(a) is not type(b):
        out.append(f"{where}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}")


def compare(dir_a: str, dir_b: str, limit: int) -> int:
    files_a = {f for f in os.listdir(dir_a) if f.endswith(".json")}
    files_b = {f for f in os.listdir(dir_b) if f.endswith(".json")}
    differing = 0
    for f in sorted(files_a - files_b):
        print(f"{f}: only in {dir_a}")
        differing += 1
    for f in sorted(files_b - files_a):
        print(f"{f}: only in {dir_b}")
        differing += 1
    for f in sorted(files_a & files_b):
        with open(os.path.join(dir_a, f)) as fa, open(os.path.join(dir_b, f)) as fb:
            a, b = json.load(fa), json.load(fb)
        if a == b:
            continue
        differing += 1
        diffs: List[str] = []
        _differences(a, b, "", diffs, limit)
        print(f"{f}: {len(diffs)}{'+' if len(diffs) >= limit else ''} differences")
        for d in diffs:
            print(f"  {d}")
    print(f"{differing} of {len(files_a | files_b)} files differ" if differing else
          f"identical: {len(files_a)} files")
    return 1 if differing else 0


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", metavar="DIR", help="write one JSON per workload and report kind into DIR")
    group.add_argument("--compare", nargs=2, metavar=("DIR_A", "DIR_B"), help="compare two such folders")
    parser.add_argument("--only", action="append", default=[], metavar="WORKLOAD",
                        help="with --out: only this workload (repeatable)")
    parser.add_argument("--limit", type=int, default=20, help="with --compare: differences shown per file")
    options = parser.parse_args(argv)
    if options.compare:
        return compare(*options.compare, options.limit)
    return write(options.out, options.only)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
