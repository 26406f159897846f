#!/usr/bin/env python3
"""Serving benchmarks: the example C++ server (tests/cpp/integrations/example_server.cc)
unattached and under tools/attach.py. Every figure comes from this run;
ratios compare arms measured side by side, and nothing is asserted.

  c. Full load: the example CNN, unattached, attached (streaming, also
     holding every call, also with a trace) and scanning itself through the
     C++ API; median of interleaved runs (tools/benchmark.py part c).
  g. Scale: a scripted model (ResNet-50 from tests/fixtures/models.py, or a
     transformer encoder) at two request counts ten times apart: the
     report's size, the server's peak RSS against the unattached server's
     and the exit report's build time.
  h. Soak: many requests of a small MLP under the launcher with the server's
     resident memory sampled while it serves: the slope after warm-up in
     bytes per request, and the final report's aggregated sums against its
     per-request totals.

  python3 tools/benchmark_serving.py --scale resnet50 --requests 1500 15000
  python3 tools/benchmark_serving.py --soak 100000
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
SERVER = REPO / "bazel-bin/tests/example_server"
SCANNED = REPO / "bazel-bin/tests/example_server_scanned"
ATTACH = REPO / "tools/attach.py"
METRICS = ("operator_flops", "module_flops", "macs", "dmas")


def _tests_path() -> None:
    if str(REPO / "tests") not in sys.path:
        sys.path.insert(0, str(REPO / "tests"))


def save_model(kind: str, folder: Path):
    """(path, input shape) of a TorchScript model the server can load."""
    import torch

    _tests_path()
    torch.manual_seed(0)
    if kind == "resnet50":
        from fixtures.models import resnet50  # noqa: WPS433

        model, shape = resnet50().eval(), (1, 3, 64, 64)
    elif kind == "transformer":
        layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True)
        model, shape = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval(), (1, 32, 128)
    elif kind == "mlp":
        model, shape = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)), (1, 64)
    elif kind == "cnn":
        from fixtures.serving import INPUT_SHAPE, build_model  # noqa: WPS433

        model, shape = build_model(), INPUT_SHAPE
    else:
        raise ValueError(f"unknown model {kind!r}: resnet50, transformer, mlp or cnn")
    path = folder / f"{kind}.pt"
    torch.jit.script(model.eval()).save(str(path))
    return path, shape


def server_command(model: Path, shape, requests: int, workers: int) -> List[str]:
    return [str(SERVER), "--model", str(model), "--requests", str(requests), "--workers", str(workers),
            "--input", ",".join(map(str, shape))]


def attached_command(output: Path, server: List[str], *launcher: str) -> List[str]:
    return [sys.executable, str(ATTACH), "--output", str(output), *launcher, "--", *server]


def _server_figures(stdout: str) -> Dict[str, float]:
    """The server's own last lines: peak_rss_kib K, elapsed_seconds S."""
    lines = stdout.strip().splitlines()
    return {"peak_rss_kib": int(lines[-2].split()[1]), "serving_s": float(lines[-1].split()[1])}


def scale(kind: str, counts: Sequence[int], workers: int = 2) -> Dict[str, Any]:
    """Part g: per request count, the unattached server and the attached one."""
    tmp = Path(tempfile.mkdtemp(prefix="torchscan-scale-"))
    model, shape = save_model(kind, tmp)
    runs = []
    for n in counts:
        server = server_command(model, shape, n, workers)
        plain = _server_figures(subprocess.run(server, capture_output=True, text=True, check=True).stdout)
        out = tmp / f"report-{n}.json"
        attached = _server_figures(subprocess.run(attached_command(out, server), capture_output=True, text=True,
                                                  check=True).stdout)
        text = out.read_text()
        report = json.loads(text)
        block = report["attach"]
        # The exit report is built after serving: its peak is the process's.
        peak = max(attached["peak_rss_kib"], block["peak_rss_kib"])
        runs.append({"requests": n, "unattached_peak_rss_mib": plain["peak_rss_kib"] / 1024,
                     "attached_peak_rss_mib": peak / 1024,
                     "peak_rss_ratio": peak / plain["peak_rss_kib"],
                     "unattached_serving_s": plain["serving_s"], "attached_serving_s": attached["serving_s"],
                     "serving_ratio": attached["serving_s"] / plain["serving_s"],
                     "report_bytes": len(text.encode()), "exit_report_s": block["report_seconds"],
                     "aggregated_rows": len(report["aggregate"]["layers"]),
                     "aggregate_requests": report["aggregate"]["requests"],
                     "operator_flops": report["operator_flops"]["total"]})
        out.unlink()
    first, last = runs[0], runs[-1]
    return {"model": kind, "input": list(shape), "workers": workers, "runs": runs,
            "report_bytes_ratio": last["report_bytes"] / first["report_bytes"],
            "peak_rss_ratio_growth": last["attached_peak_rss_mib"] / first["attached_peak_rss_mib"]}


def serve_sampling_rss(command: List[str], every_s: float = 0.02):
    """Runs the server (under the launcher: it execs, keeping the pid) and
    samples its VmRSS while it serves; returns (stdout lines, samples of
    (requests served so far, resident bytes))."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    served = [0]
    samples: List[tuple] = []
    done = threading.Event()

    def sample():
        status = f"/proc/{proc.pid}/status"
        while not done.is_set():
            try:
                with open(status) as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            samples.append((served[0], int(line.split()[1]) * 1024))
            except OSError:
                return
            time.sleep(every_s)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("served "):
            served[0] = int(line.split()[1])
    done.set()
    stderr = proc.stderr.read()
    if proc.wait() != 0:
        raise RuntimeError(f"the server failed ({proc.returncode}): {stderr[-2000:]}")
    sampler.join()
    return lines, samples


def slope_after_warmup(samples: List[tuple], requests: int, warmup: float = 0.2) -> Optional[float]:
    """Least-squares slope of resident bytes over requests served, from
    `warmup` of the requests on (bytes per request)."""
    pts = [(n, b) for n, b in samples if warmup * requests <= n < requests]
    if len(pts) < 3 or len({n for n, _ in pts}) < 2:
        return None
    mx = statistics.fmean(n for n, _ in pts)
    my = statistics.fmean(b for _, b in pts)
    return sum((n - mx) * (b - my) for n, b in pts) / sum((n - mx) ** 2 for n, _ in pts)


def aggregate_consistency(report: Dict[str, Any]) -> Dict[str, Any]:
    """Per metric: the aggregated layer rows' sum and the request classes'
    sum of requests x totals (every module call of these models is inside a
    request, so both are the work the requests did)."""
    agg = report["aggregate"]
    out = {}
    for m in METRICS:
        rows = sum(l["metrics"][m]["known_value"] for l in agg["layers"])
        requests = sum(c["requests"] * c["totals"][m]["known_value"] for c in agg["request_classes"])
        out[m] = {"layers": rows, "requests": requests}
    out["requests"] = agg["requests"]
    out["classes"] = len(agg["request_classes"])
    return out


def soak(requests: int, workers: int = 2, kind: str = "mlp") -> Dict[str, Any]:
    """Part h."""
    tmp = Path(tempfile.mkdtemp(prefix="torchscan-soak-"))
    model, shape = save_model(kind, tmp)
    out = tmp / "report.json"
    started = time.perf_counter()
    lines, samples = serve_sampling_rss(attached_command(out, server_command(model, shape, requests, workers)))
    wall = time.perf_counter() - started
    report = json.loads(out.read_text())
    slope = slope_after_warmup(samples, requests)
    rss = [b for _, b in samples]
    return {"model": kind, "input": list(shape), "requests": requests, "workers": workers, "wall_s": wall,
            "rss_samples": len(samples), "rss_slope_bytes_per_request": slope,
            "rss_first_mib": rss[0] / 2**20 if rss else None, "rss_last_mib": rss[-1] / 2**20 if rss else None,
            "exit_report_s": report["attach"]["report_seconds"], "report_bytes": out.stat().st_size,
            "operator_flops": report["operator_flops"]["total"], "consistency": aggregate_consistency(report)}


def bench_serving(requests: int, workers: int, repeats: int) -> Dict[str, Any]:
    """Part c: the example CNN at full load: unattached, under
    tools/attach.py (also with --trace: every thread's calls timed, the
    trace written after the exit report), and scanning itself through the
    C++ API (all threads, one RequestScope per request). Runs are
    interleaved; each arm's figure is the median of the servers' own
    serving time."""
    _tests_path()
    from fixtures.serving import INPUT_SHAPE, build_model, save_torchscript  # noqa: WPS433

    tmp = Path(tempfile.mkdtemp(prefix="torchscan-serving-"))
    model = save_torchscript(build_model(), tmp / "model.pt")
    common = ["--model", str(model), "--requests", str(requests), "--workers", str(workers),
              "--input", ",".join(map(str, INPUT_SHAPE))]
    arms = {
        "unattached": [str(SERVER), *common],
        "attached": [sys.executable, str(ATTACH), "--output", str(tmp / "attached.json"),
                     "--", str(SERVER), *common],
        "attached_hold_calls": [sys.executable, str(ATTACH), "--output", str(tmp / "held.json"),
                                "--hold-calls", "--", str(SERVER), *common],
        # Held calls with two clock reads per call on every thread: the cost of
        # an all-threads trace (its ratio to attached_hold_calls is the clock's
        # share; a trace needs every call, so --trace holds them).
        "attached_trace": [sys.executable, str(ATTACH), "--output",
                           str(tmp / "attached_trace.json"), "--trace", str(tmp / "trace.json"),
                           "--", str(SERVER), *common],
        "cpp_api_join_on_first_call": [str(SCANNED), *common, "--scan", str(tmp / "api.json")],
        "cpp_api_join_at_start": [str(SCANNED), *common, "--scan", str(tmp / "api2.json"), "--join-at-start"],
        "cpp_api_join_at_start_lean": [str(SCANNED), *common, "--scan", str(tmp / "api3.json"), "--join-at-start",
                                       "--lean"],
    }
    times: Dict[str, List[float]] = {a: [] for a in arms}
    walls: Dict[str, List[float]] = {a: [] for a in arms}
    rss: Dict[str, List[float]] = {a: [] for a in arms}
    report_s: Dict[str, List[float]] = {"attached": [], "attached_hold_calls": []}
    reports = {"attached": tmp / "attached.json", "attached_hold_calls": tmp / "held.json"}
    for r in range(repeats + 1):  # the first round warms caches up and is dropped
        for arm in (list(arms) if r % 2 == 0 else list(reversed(arms))):
            started = time.perf_counter()
            out = subprocess.run(arms[arm], capture_output=True, text=True, check=True).stdout
            wall = time.perf_counter() - started
            figures = _server_figures(out)
            # The server's own peak RSS (VmHWM, since exec: not the launcher's
            # Python); attached, the exit report's, which comes later.
            peak_kib = figures["peak_rss_kib"]
            if arm in reports:
                block = json.loads(reports[arm].read_text())["attach"]
                peak_kib = max(peak_kib, block["peak_rss_kib"])
            if r:
                times[arm].append(figures["serving_s"])
                walls[arm].append(wall)
                rss[arm].append(peak_kib / 1024)
                if arm in reports:
                    report_s[arm].append(block["report_seconds"])
    med = {a: statistics.median(t) for a, t in times.items()}
    report = json.loads((tmp / "attached.json").read_text())
    trace_events = len(json.loads((tmp / "trace.json").read_text())["traceEvents"])
    return {"requests": requests, "workers": workers, "repeats": repeats, "median_s": med,
            "ratio_vs_unattached": {a: med[a] / med["unattached"] for a in arms if a != "unattached"},
            "median_wall_s": {a: statistics.median(t) for a, t in walls.items()},
            "median_peak_rss_mib": {a: statistics.median(t) for a, t in rss.items()},
            "attached_exit_report_s": statistics.median(report_s["attached"]),
            "held_exit_report_s": statistics.median(report_s["attached_hold_calls"]),
            "attached_trace_over_hold_calls": med["attached_trace"] / med["attached_hold_calls"],
            "trace_events": trace_events,
            "attached_report_total": report["operator_flops"]["total"]}


def print_scale(sc: Dict[str, Any]) -> None:
    print(f"[g] {sc['model']} (input {'x'.join(map(str, sc['input']))}, {sc['workers']} workers), "
          "unattached and attached (streaming, aggregated rows)")
    print(f"      {'requests':>9} {'report':>10} {'rows':>5} {'exit report':>12} {'peak RSS':>18} {'ratio':>6} "
          f"{'serving':>16}")
    for r in sc["runs"]:
        print(f"      {r['requests']:>9,} {r['report_bytes'] / 1024:7.1f} KiB {r['aggregated_rows']:>5} "
              f"{r['exit_report_s']:10.3f} s {r['unattached_peak_rss_mib']:6.0f} -> {r['attached_peak_rss_mib']:4.0f} MiB "
              f"{r['peak_rss_ratio']:5.2f}x {r['unattached_serving_s']:6.1f} -> {r['attached_serving_s']:5.1f} s")
    print(f"      report size, last / first: {sc['report_bytes_ratio']:.3f}x; attached peak RSS, last / first: "
          f"{sc['peak_rss_ratio_growth']:.3f}x")


def print_soak(so: Dict[str, Any]) -> None:
    c = so["consistency"]
    slope = so["rss_slope_bytes_per_request"]
    print(f"[h] soak: {so['requests']:,} requests of a {so['model']} on {so['workers']} workers under the launcher "
          f"({so['wall_s']:.1f} s)")
    print(f"      RSS {so['rss_first_mib']:.1f} -> {so['rss_last_mib']:.1f} MiB over {so['rss_samples']} samples; "
          f"slope after warm-up {'n/a' if slope is None else f'{slope:.2f}'} B/request")
    print(f"      exit report {so['exit_report_s']:.3f} s, {so['report_bytes'] / 1024:.1f} KiB; "
          f"{c['requests']:,} requests in {c['classes']} class(es)")
    for m in METRICS:
        same = "==" if c[m]["layers"] == c[m]["requests"] else "!="
        print(f"      {m:<15} layer rows {c[m]['layers']:,} {same} requests x totals {c[m]['requests']:,}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", nargs="*", metavar="MODEL", help="part g for these models (resnet50, transformer)")
    p.add_argument("--requests", type=int, nargs="+", default=[1500, 15000], help="part g request counts")
    p.add_argument("--soak", type=int, metavar="N", help="part h with N requests (the issue's figure: 100000)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    args = p.parse_args(argv)
    for binary in (SERVER,):
        if not binary.exists():
            print(f"{binary} is missing: run `bash tools/setup.sh`", file=sys.stderr)
            return 2
    result: Dict[str, Any] = {}
    for kind in args.scale or []:
        result[f"scale_{kind}"] = sc = scale(kind, args.requests, args.workers)
        print_scale(sc)
    if args.soak:
        result["soak"] = so = soak(args.soak, args.workers)
        print_soak(so)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, sort_keys=True, default=str))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
