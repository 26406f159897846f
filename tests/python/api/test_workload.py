"""Workload measurements: measure_latency, measure_peak_memory,
measure_workload, their argument checks and the bench/compare/render commands
(report schema "BenchmarkReport"); comparisons and rendering are in
test_workload_compare.py.

Expected values are derived by hand next to each assertion: sleeps of a known
length, tensors of a known size, matrix products of known shapes, block
times chosen by the test."""

import json
import resource
import time

import pytest
import torch
from torch.utils.benchmark.utils.common import Measurement, TaskSpec

from conftest import METRIC_STATUSES
from tests.fixtures.workload_testing import MIB, ts  # noqa: F401  (ts is a fixture)


def _check_metric(m, unit=None, scope=None):
    assert set(m) == {"status", "value", "known_value", "unit", "scope", "method"}
    assert m["status"] in METRIC_STATUSES
    if m["status"] == "complete":
        assert m["value"] is not None and m["known_value"] == m["value"]
    if m["status"] == "unavailable":
        assert m["value"] is None and m["known_value"] is None
    if unit is not None:
        assert m["unit"] == unit
    if scope is not None:
        assert m["scope"] == scope


def _not_requested(m):
    assert m["status"] == "unavailable" and m["method"] == "not_requested"
    assert m["value"] is None and m["known_value"] is None


def _check_report_schema(r, kind):
    """Field by field: the BenchmarkReport parts of the report schema."""
    assert r["schema_version"] == 1
    assert {"schema_version", "context", "inputs", "measurement", "totals", "diagnostics"} <= set(r)
    ctx = r["context"]
    for key in ("torchscan_version", "torch_version", "python_version", "hardware", "software", "threads",
                "timing", "work_unit", "execution_state", "device"):
        assert key in ctx, key
    assert ctx["measurement"] == kind
    assert ctx["torch_version"] == torch.__version__
    assert ctx["hardware"]["cpu_count"] is not None and ctx["hardware"]["machine"]
    assert ctx["threads"]["torch_num_threads"] >= 1 and ctx["threads"]["torch_num_interop_threads"] >= 1
    assert set(r["inputs"]) == {"source", "args", "kwargs"}
    for name, m in r["totals"].items():
        _check_metric(m)
    for d in r["diagnostics"]:
        assert {"code", "severity", "metric", "message"} <= set(d) and d["severity"] in ("warning", "error")
    json.dumps(r, allow_nan=False)  # JSON-serializable, no NaN
    m = r["measurement"]
    if m:
        assert m["measured_calls"] == m["number_per_run"] * len(m["raw_times_seconds"])
        assert ctx["timing"]["semantics"] == "torch.utils.benchmark.Timer.blocked_autorange"


# ---------------------------------------------------------------- statistics


def test_block_statistics_by_hand(ts):
    from torchscan.workload import _block_statistics

    # Blocks of 2 calls taking 8, 2, 6, 4 s: averages 4, 1, 3, 2; sorted
    # 1, 2, 3, 4. Linear-interpolation quantiles at positions (n-1)q = 3q:
    # q1 at 0.75 -> 1 + 0.75 = 1.75; median at 1.5 -> 2.5; q3 at 2.25 ->
    # 3 + 0.25 = 3.25; IQR 1.5.
    s = _block_statistics([8.0, 2.0, 6.0, 4.0], 2)
    assert (s["q1"], s["median"], s["q3"], s["iqr"]) == (1.75, 2.5, 3.25, 1.5)
    # Same figures as torch.utils.benchmark.Measurement on the same blocks.
    raw = [0.013, 0.011, 0.017, 0.012, 0.019, 0.010, 0.0135]
    ref = Measurement(number_per_run=3, raw_times=raw, task_spec=TaskSpec(stmt="", setup=""))
    s = _block_statistics(raw, 3)
    assert s["median"] == pytest.approx(ref.median, rel=1e-12)
    assert s["iqr"] == pytest.approx(ref.iqr, rel=1e-12)


# ---------------------------------------------------------------- latency


def test_latency_of_a_known_sleep(ts):
    calls = [0]

    def workload():
        calls[0] += 1
        time.sleep(0.004)

    r = ts.measure_latency(workload, min_run_time=0.25, warmup=2, work_units=8, work_unit="samples",
                           inputs=(torch.zeros(8, 3),))
    _check_report_schema(r, "latency")
    assert set(r["totals"]) == {"first_call_latency", "latency", "latency_iqr", "throughput"}
    m, t = r["measurement"], r["totals"]
    # time.sleep never returns early, so every call takes >= 4 ms; a loaded
    # loaded machine adds scheduling delay (6.8 ms seen at load average 6), so
    # the upper bound is two sleeps: the figure is one call's, not a block's.
    assert 0.004 <= t["latency"]["value"] < 0.008
    assert t["first_call_latency"]["value"] >= 0.004
    # Median and IQR come from the block averages in the report.
    averages = sorted(x / m["number_per_run"] for x in m["raw_times_seconds"])
    assert m["block_averages_seconds"] == [x / m["number_per_run"] for x in m["raw_times_seconds"]]
    ref = Measurement(number_per_run=m["number_per_run"], raw_times=m["raw_times_seconds"],
                      task_spec=TaskSpec(stmt="", setup=""))
    assert t["latency"]["value"] == pytest.approx(ref.median, rel=1e-12)
    assert t["latency_iqr"]["value"] == pytest.approx(ref.iqr, rel=1e-12)
    assert averages[0] <= m["q1_seconds"] <= m["median_seconds"] <= m["q3_seconds"] <= averages[-1]
    # Stop rule: blocks until their total reaches min_run_time, not one more.
    assert sum(m["raw_times_seconds"]) >= 0.25 > sum(m["raw_times_seconds"][:-1])
    # Every call accounted for: first call + warmup + block-size estimation + blocks.
    assert calls[0] == 1 + 2 + m["block_size_estimation_calls"] + m["measured_calls"]
    # Throughput for the stated work unit: 8 samples per call / median.
    assert t["throughput"]["unit"] == "samples/second"
    assert t["throughput"]["value"] == pytest.approx(8 / t["latency"]["value"])
    assert r["context"]["work_unit"]["units_per_call"] == 8
    assert r["context"]["timing"]["synchronization"].startswith("none")
    assert r["inputs"]["source"] == "caller"
    assert r["inputs"]["args"]["items"][0]["shape"] == [8, 3]


@pytest.fixture
def two_threads():
    """Two intra-op threads (the suite runs with one): a measurement with
    num_threads=1 must then be seen to change the count and restore it."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_latency_fixed_blocks_and_threads(ts, two_threads):
    calls, seen = [0], []
    before_threads = torch.get_num_threads()
    assert before_threads == 2

    def workload():
        calls[0] += 1
        seen.append(torch.get_num_threads())

    r = ts.measure_latency(workload, number=3, repeats=5, warmup=0, num_threads=1, min_run_time=10.0)
    m = r["measurement"]
    # Exactly 5 blocks of 3 calls (min_run_time does not stop a repeats run):
    # 15 measured calls, plus the first call, no warmup, no estimation.
    assert (m["number_per_run"], len(m["raw_times_seconds"]), m["measured_calls"]) == (3, 5, 15)
    assert calls[0] == 16 and m["block_size_estimation_calls"] == 0
    # Threads set for the measurement as Timer(num_threads=1) does, recorded, restored.
    assert set(seen) == {1}
    assert r["context"]["timing"]["num_threads"] == 1
    assert torch.get_num_threads() == before_threads


def test_progress_line(ts, monkeypatch, capsys):
    import torchscan.workload as workload_module

    ts.measure_latency(lambda: None, number=1, repeats=3, progress=True)
    assert capsys.readouterr().err == ""  # timing shorter than a few seconds: no line
    monkeypatch.setattr(workload_module, "_PROGRESS_AFTER", 0.0)
    ts.measure_latency(lambda: None, number=1, repeats=3, progress=True)
    err = capsys.readouterr().err
    assert err.startswith("\rtorchscan: timing: 1 blocks") and err.endswith("\n")
    ts.measure_latency(lambda: None, number=1, repeats=3)
    assert capsys.readouterr().err == ""  # progress=False (the default): silent


# ---------------------------------------------------------------- peak memory


def test_peak_memory_of_known_tensors(ts):
    def workload():
        a = torch.empty(8 * MIB, dtype=torch.uint8)  # noqa: F841  8 MiB, alive until the workload returns
        b = torch.ones(1000)  # noqa: F841  1000 float32 = 4000 bytes, alive with a
        return None

    r = ts.measure_peak_memory(workload)
    assert r["schema_version"] == 1 and r["device"] == "cpu"
    _check_metric(r["peak_memory"], unit="bytes", scope="workload")
    # Hand value: both alive at once, 8 MiB + 4000 bytes. Tolerance: up to
    # 64 KiB more for allocations by PyTorch itself during the call.
    peak = r["peak_memory"]["value"]
    assert 8 * MIB + 4000 <= peak <= 8 * MIB + 4000 + 64 * 1024
    assert r["memory"]["peak_bytes"] == peak and "running sum" in r["memory"]["meaning"]
    # Both freed when the workload returned: net 0.
    assert r["memory"]["net_bytes"] == 0


def test_peak_memory_sequence_and_baseline(ts):
    def sequential():
        a = torch.empty(8 * MIB, dtype=torch.uint8)
        del a  # 8 MiB freed before the next allocation
        return torch.empty(4 * MIB, dtype=torch.uint8)  # kept: returned

    r = ts.measure_peak_memory(sequential)
    # Peak 8 MiB (not 12: never alive together); net 4 MiB still alive at the end.
    assert 8 * MIB <= r["peak_memory"]["value"] <= 8 * MIB + 64 * 1024
    assert 4 * MIB <= r["memory"]["net_bytes"] <= 4 * MIB + 64 * 1024

    holder = [torch.empty(8 * MIB, dtype=torch.uint8)]

    def frees_then_allocates():
        holder.pop()  # frees 8 MiB allocated before the call
        return torch.empty(2 * MIB, dtype=torch.uint8)  # +2 MiB

    # Only blocks allocated during the call count; freeing an older tensor
    # does not lower the figure (the profiler records no such free): 2 MiB.
    r = ts.measure_peak_memory(frees_then_allocates)
    assert 2 * MIB <= r["peak_memory"]["value"] <= 2 * MIB + 64 * 1024


def test_a_free_of_an_older_block_never_lowers_the_figure(ts, monkeypatch):
    import torchscan.workload as workload_module

    # The allocator's reporter may free a block allocated before the call
    # under a stale size (an address it saw while an earlier profiler ran):
    # -8 MiB, then the call's own +2 MiB and -1 MiB. The call's blocks peak at
    # 2 MiB and 1 MiB is alive at the end, whatever the older free said.
    events = [(1, -8 * MIB), (2, 2 * MIB), (3, -MIB)]
    monkeypatch.setattr(workload_module, "_profiler_memory_events", lambda prof, device: events)
    r = ts.measure_peak_memory(lambda: None)
    assert r["peak_memory"]["value"] == 2 * MIB
    assert r["memory"]["net_bytes"] == MIB


def test_peak_memory_of_an_mlp_matches_hand_and_allocator_figures(ts, tmp_path):
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).eval()
    x = torch.randn(32, 256)

    def workload():
        with torch.inference_mode():
            return mlp(x)

    workload()  # lazy initialisation outside the measured runs
    r = ts.measure_peak_memory(workload)
    # Hand derivation (float32, batch 32; Sequential rebinds its input, so a
    # layer's input is freed once the next layer's output exists):
    #   Linear(256,512) output 32*512*4 = 65536 alive           -> 65536
    #   ReLU output (not in place) 65536 more                   -> 131072 (peak)
    #   Linear output freed                                     -> 65536
    #   Linear(512,10) output 32*10*4 = 1280                    -> 66816
    #   ReLU output freed; the returned 1280 bytes stay alive   -> 1280
    assert r["peak_memory"]["value"] == 131072
    assert r["memory"]["net_bytes"] == 1280
    assert r["memory"]["allocated_bytes"] == 65536 * 2 + 1280
    # The allocator's own running figure on an identical call: c10's profiled
    # CPU memory reporter writes "Total Allocated" into every memory event of
    # the trace; its value before the call is the first event's total minus
    # that event's bytes (it can start above 0: the reporter keeps counting
    # blocks from earlier profiled runs that were freed after profiling
    # stopped). Tolerance: none (the same deterministic allocations).
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        workload()
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    events = [e["args"] for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
              if e.get("name") == "[memory]"]
    baseline = events[0]["Total Allocated"] - events[0]["Bytes"]
    assert max(e["Total Allocated"] for e in events) - baseline == r["peak_memory"]["value"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine: the CUDA allocator "
                                                          "path of measure_peak_memory cannot run here")
def test_peak_memory_cuda(ts):
    r = ts.measure_peak_memory(lambda: torch.empty(8 * MIB, dtype=torch.uint8, device="cuda"), device="cuda")
    # The caching allocator rounds to 512-byte blocks: 8 MiB is already a multiple.
    assert r["peak_memory"]["value"] == 8 * MIB


# ---------------------------------------------------------------- measure_workload


def test_measure_workload_totals_and_evidence(ts):
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    r = ts.measure_workload(lambda: a @ b, profile=True)
    _check_report_schema(r, "workload")
    t = r["totals"]
    assert set(t) == {"first_call_latency", "latency", "latency_iqr", "throughput", "operator_flops",
                      "peak_memory", "process_peak_rss"}
    # (4x8) @ (8x3): 4*3 outputs, 8-term dots, 2K = 16 FLOPs each: 192.
    assert t["operator_flops"]["status"] == "complete" and t["operator_flops"]["value"] == 192
    assert r["operator_flops"]["by_operator"] == {"aten.mm": 192}
    assert t["operator_flops"] == r["operator_flops"]["total"]  # measure_flops's own total, unchanged
    # The output: 4*3 float32 = 48 bytes allocated (and kept: returned).
    assert t["peak_memory"]["value"] >= 48 and r["memory"]["net_bytes"] >= 48
    _check_metric(t["process_peak_rss"], unit="bytes", scope="process_lifetime")
    assert t["process_peak_rss"]["value"] >= rss_before  # a peak since process start never shrinks
    # Timing not requested: empty measurement, latency totals not_requested.
    assert r["measurement"] == {} and r["context"]["timing"] is None
    for name in ("first_call_latency", "latency", "latency_iqr", "throughput"):
        _not_requested(t[name])
    assert r["context"]["profile_status"] == "complete"
    assert "aten::mm" in {row["name"] for row in r["profile"]["operators"]}

    r = ts.measure_workload(lambda: a @ b, flops=False, memory=False, evidence=False)
    _not_requested(r["totals"]["operator_flops"])
    _not_requested(r["totals"]["peak_memory"])
    assert r["totals"]["process_peak_rss"]["status"] == "complete"
    assert r["context"]["profile_status"] == "not_requested"
    assert not {"operator_flops", "memory", "profile"} & set(r)

    r = ts.measure_workload(lambda: a @ b, latency=True, min_run_time=0.02, memory=False)
    assert r["measurement"]["measured_calls"] > 0 and r["totals"]["latency"]["status"] == "complete"


class Boom(Exception):
    pass


@pytest.mark.parametrize("what", ["latency_first", "latency_blocks", "flops", "memory", "profile"])
def test_workload_errors_propagate_and_leave_nothing(ts, what, two_threads):
    error = Boom("from the workload")
    calls = [0]
    fail_at = 3 if what == "latency_blocks" else 1

    def workload():
        calls[0] += 1
        if calls[0] == fail_at:
            raise error
        return torch.ones(2) + 1

    threads = torch.get_num_threads()
    assert threads == 2
    options = {"latency_first": dict(latency=True, flops=False, memory=False),
               "latency_blocks": dict(latency=True, flops=False, memory=False, number=1, warmup=0),
               "flops": dict(flops=True, memory=False), "memory": dict(flops=False, memory=True),
               "profile": dict(flops=False, memory=False, profile=True)}[what]
    with pytest.raises(Boom) as info:
        ts.measure_workload(workload, num_threads=1, **options)
    assert info.value is error  # unchanged, the same object
    assert torch.get_num_threads() == threads
    assert not ts.tls_mode_included()
    assert not torch.autograd.profiler._is_profiler_enabled
    # Nothing left behind: a new profiler and a new scan start normally.
    assert ts.measure_peak_memory(lambda: torch.empty(1024, dtype=torch.uint8))["peak_memory"]["value"] >= 1024
    assert ts.measure_flops(lambda: torch.ones(3) + 1)["total"]["status"] == "complete"


# ---------------------------------------------------------------- input validation


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(warmup=-1), ValueError, "warmup must be >= 0"),
    (dict(warmup=1.5), TypeError, "warmup must be an int"),
    (dict(min_run_time=0), ValueError, "min_run_time must be a positive finite"),
    (dict(min_run_time="1"), TypeError, "min_run_time must be a positive number"),
    (dict(number=0), ValueError, "number must be >= 1"),
    (dict(repeats=True), TypeError, "repeats must be an int"),
    (dict(device=3), TypeError, "device must be a string"),
    (dict(device="nonsense"), ValueError, "not a device name"),
    (dict(work_units=0), ValueError, "work_units must be a positive"),
    (dict(work_unit=""), TypeError, "work_unit must be a non-empty name"),
    (dict(num_threads=0), ValueError, "num_threads must be >= 1"),
    (dict(input_kwargs=[1]), TypeError, "input_kwargs must be a mapping"),
])
def test_latency_arguments_are_checked(ts, kwargs, error, match):
    calls = [0]

    def workload():
        calls[0] += 1

    with pytest.raises(error, match=match):
        ts.measure_latency(workload, **kwargs)
    assert calls[0] == 0  # refused before running anything


def test_workload_arguments_are_checked(ts):
    with pytest.raises(TypeError, match="zero-argument callable"):
        ts.measure_latency(42)
    with pytest.raises(TypeError, match="zero-argument callable"):
        ts.measure_peak_memory(None)
    with pytest.raises(TypeError, match="flops must be True or False"):
        ts.measure_workload(lambda: None, flops=1)
    with pytest.raises(ValueError, match="custom_mapping applies to FLOP counting"):
        ts.measure_workload(lambda: None, flops=False, custom_mapping={})
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="not available here"):
            ts.measure_peak_memory(lambda: None, device="cuda")

    def gen():
        yield torch.ones(2)

    with pytest.raises(TypeError, match="none of its body ran"):
        ts.measure_latency(gen, number=1, repeats=1)
    with pytest.raises(TypeError, match="none of its body ran"):
        ts.measure_peak_memory(gen)


# ---------------------------------------------------------------- command line


def test_cli_bench_compare_render_round_trip(ts, tmp_path, capsys):
    from torchscan.__main__ import main

    bench = tmp_path / "bench.json"
    assert main(["bench", "torchscan.examples:small_cnn", "--input-shape", "3,32,32", "--batch-size", "2",
                 "--min-run-time", "0.05", "--output", str(bench)]) == 0
    out = capsys.readouterr().out
    assert "Latency (median)" in out and "Peak memory" in out
    r = json.loads(bench.read_text())
    _check_report_schema(r, "workload")
    assert r["inputs"]["source"] == "generated" and r["inputs"]["args"]["items"][0]["shape"] == [2, 3, 32, 32]
    assert r["totals"]["throughput"]["unit"] == "samples/second"
    assert r["totals"]["operator_flops"]["status"] in ("complete", "partial")

    comparison = tmp_path / "comparison.json"
    assert main(["compare", str(bench), str(bench), "--outputs-checked", "--output", str(comparison)]) == 0
    assert "Output check: passed" in capsys.readouterr().out
    c = json.loads(comparison.read_text())
    assert c["totals"]["operator_flops"]["delta"] in (0, None)
    assert c["totals"]["latency"]["delta"] == 0.0

    assert main(["compare", str(bench), str(bench)]) == 0
    assert "withheld" in capsys.readouterr().out  # no --outputs-checked: no deltas

    assert main(["render", str(comparison)]) == 0
    assert "benchmark comparison" in capsys.readouterr().out
    assert main(["render", str(bench)]) == 0
    assert "TorchScan benchmark" in capsys.readouterr().out

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dict(r, schema_version=9)))
    with pytest.raises(SystemExit, match="torchscan compare: the before report: schema_version 9 is not supported"):
        main(["compare", str(bad), str(bench)])
    with pytest.raises(SystemExit, match=r"torchscan render: the report .*bad.json: schema_version 9 is not supported"):
        main(["render", str(bad)])
    with pytest.raises(SystemExit, match="torchscan compare: the after report .* does not exist"):
        main(["compare", str(bench), str(tmp_path / "missing.json")])
    with pytest.raises(SystemExit, match="--batch-size must be >= 1"):
        main(["bench", "torchscan.examples:small_cnn", "--input-shape", "3,32,32", "--batch-size", "0"])
