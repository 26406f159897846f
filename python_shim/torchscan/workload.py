"""Workload measurements (report schema "BenchmarkReport" and
"BenchmarkComparison"): latency, peak memory, process peak RSS and operator
FLOPs of one owner-provided zero-argument workload, and checked comparisons
of two such reports.

What each number means
----------------------
- ``latency``: the median of block averages. Timing follows
  ``torch.utils.benchmark.Timer.blocked_autorange``: a block runs the
  workload ``number_per_run`` times between two clock readings (each reading
  preceded by a synchronisation of the selected device), the block size is
  chosen as Timer chooses it (x10 until the clock's overhead is <= 0.01% of a
  block and a block lasts >= min_run_time / 1000, or a block exceeds
  min_run_time), and blocks run until their total time reaches min_run_time
  (or exactly ``repeats`` blocks). A block average is block time /
  number_per_run. Median and quartiles use linear interpolation between
  order statistics, as ``torch.utils.benchmark.Measurement`` does.
- ``latency_iqr``: 75th minus 25th percentile of the block averages.
- ``first_call_latency``: the first call of this measurement, alone,
  synchronised before and after (lazy initialisation shows up here; it is the
  first call of the process only if nothing ran the workload before).
- ``throughput``: work units per call / median latency, in the caller's
  stated unit (``work_unit``, default "calls").
- ``peak_memory`` (CPU): the highest number of bytes alive at once among
  the blocks PyTorch's CPU allocator handed out during one call: the maximum
  of the running sum of the profiler's memory events (allocations +, frees -)
  in time order (``torch.profiler.profile(profile_memory=True)``). Tensors
  alive before the call are not in it, and freeing them inside the call does
  not lower it (the profiler records no free of a block allocated before it
  started). Memory not allocated by PyTorch's allocator (Python objects,
  library scratch space) is not in it; allocations by other threads of the
  process during the call are.
  (CUDA): ``torch.cuda.max_memory_allocated(device)`` after
  ``reset_peak_memory_stats(device)``, minus ``memory_allocated(device)``
  before the call: the allocator's peak of bytes in live tensors above the
  starting level (cached but free blocks are not counted).
- ``process_peak_rss``: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` in
  bytes: the whole process's peak resident set since it started, read after
  the measurements; it is an upper bound on nothing in particular about the
  workload and is kept for reproducibility records.
- ``operator_flops``: ``torchscan.measure_flops``'s total for one call.

Every measurement runs the workload separately (timing, then FLOPs, then
memory, then the profile), so instrumentation never lands inside timed
blocks. Exceptions raised by the workload propagate unchanged; thread
settings, profilers and scans started here are stopped first.
"""

from __future__ import annotations

import functools
import re
import sys
import time
from typing import Any, Callable, Mapping, Optional

import torch

# Timing and the arguments' checks and context records live in modules of
# their own; these names stay importable from here.
from torchscan._latency import _IQR_WARN, _TIMER_METHOD, _latency_part, _time_latency  # noqa: F401
from torchscan._metric import metric as _metric
from torchscan._profiler_noise import ProfilerNoise
from torchscan._workload_setup import (_check_workload, _context, _cpu_model, _device, _inputs,  # noqa: F401
                                       _int_arg, _latency_options, _positive_real, _refuse_unstarted,
                                       _sync_name, _synchronizer, _work_unit, _work_unit_record)

# The reports' reading side (validation, comparison, rendering) lives in
# torchscan.benchmark_reports; these names stay importable from here.
from torchscan.benchmark_reports import (SCHEMA_VERSION, _STATUSES, _block_statistics, _quantile,  # noqa: F401
                                         compare_benchmarks, is_benchmark_comparison, is_benchmark_report,
                                         render_benchmark, validate_benchmark_comparison,
                                         validate_benchmark_report)

__all__ = ["measure_latency", "measure_peak_memory", "measure_workload", "compare_benchmarks",
           "render_benchmark", "is_benchmark_report", "is_benchmark_comparison"]

_LATENCY_TOTALS = ("first_call_latency", "latency", "latency_iqr", "throughput")
_WORKLOAD_TOTALS = ("operator_flops", "peak_memory", "process_peak_rss")
_PROGRESS_AFTER = 3.0  # seconds of timing before a progress line appears


def _not_requested(name: str) -> dict:
    unit, scope = _UNITS[name]
    return _metric("unavailable", unit=unit, scope=scope)


_UNITS = {
    "first_call_latency": ("seconds", "first_call"),
    "latency": ("seconds", "call"),
    "latency_iqr": ("seconds", "call"),
    "throughput": ("calls/second", "call"),
    "operator_flops": ("FLOPs", "workload"),
    "peak_memory": ("bytes", "workload"),
    "process_peak_rss": ("bytes", "process_lifetime"),
}


# ---------------------------------------------------------------- latency


class _Progress:
    """A progress line on stderr once timing has run for a few seconds."""

    def __init__(self, enabled: bool, min_run_time: float):
        self.enabled = enabled
        self.start = time.perf_counter()
        self.last = 0.0
        self.shown = False
        self.min_run_time = min_run_time

    def block(self, blocks: int, total: float) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.start >= _PROGRESS_AFTER and now - self.last >= 1.0:
            self.last = now
            self.shown = True
            sys.stderr.write(f"\rtorchscan: timing: {blocks} blocks, {total:.1f} s of "
                             f"{self.min_run_time:g} s measured, {now - self.start:.0f} s elapsed")
            sys.stderr.flush()

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def measure_latency(workload: Callable[[], Any], *, warmup: int = 1, min_run_time: float = 0.2,
                    number: Optional[int] = None, repeats: Optional[int] = None, device=None,
                    work_units=None, work_unit: Optional[str] = None, num_threads: Optional[int] = None,
                    inputs: Any = None, input_kwargs: Optional[Mapping] = None, progress: bool = False) -> dict:
    """Time `workload()` and return a schema-v1 BenchmarkReport.

    First call timed alone, then `warmup` untimed calls, then blocks of
    `number` calls (estimated as torch.utils.benchmark.Timer does when None)
    until their total reaches `min_run_time` seconds (or exactly `repeats`
    blocks). `device` selects the device synchronised around every timed
    region ('cpu' by default: no synchronisation). `work_units` per call (e.g.
    the batch size) named `work_unit` give the throughput. `num_threads` sets
    torch's intra-op threads during timing (restored after); None keeps the
    current setting; either way the count is recorded. `inputs` /
    `input_kwargs` are described as metadata only (never passed to the
    workload). `progress` prints a progress line on stderr once timing has run
    for a few seconds. Errors raised by the workload propagate unchanged.
    """
    where = "torchscan.measure_latency"
    _check_workload(workload, where)
    opts = _latency_options(where, warmup, min_run_time, number, repeats, device, work_units, work_unit,
                            num_threads, input_kwargs)
    dev = opts["dev"]
    context = _context("latency", dev)
    totals, measurement, timing, diagnostics = _latency_part(
        workload, where, progress=functools.partial(_Progress, bool(progress)), **{
        k: opts[k] for k in ("warmup", "min_run_time", "number", "repeats", "dev", "num_threads", "work_units",
                             "work_unit")})
    context["timing"] = timing
    context["work_unit"] = _work_unit_record(opts)
    return {"schema_version": SCHEMA_VERSION, "context": context, "inputs": _inputs(inputs, input_kwargs),
            "measurement": measurement, "totals": totals, "diagnostics": diagnostics}


# ---------------------------------------------------------------- memory


_CPU_MEANING = ("peak bytes alive at once among the blocks PyTorch's CPU allocator handed out during one call: "
                "the maximum running sum of torch.profiler memory events (allocations minus frees, in time "
                "order); tensors alive before the call are not counted and freeing them does not lower it; "
                "excludes memory not allocated by PyTorch (Python objects, library scratch space); includes "
                "allocations by other threads during the call")
_CUDA_MEANING = ("peak bytes in live tensors of the CUDA caching allocator during one call, above the bytes "
                 "allocated when the call started: torch.cuda.max_memory_allocated after "
                 "reset_peak_memory_stats, minus memory_allocated before (cached free blocks excluded)")


def _profiler_memory_events(prof, device_type: str) -> list:
    """(time_ns, bytes) of the profiler's memory events on one device type;
    frees have negative sizes."""
    events = []
    for e in prof.profiler.kineto_results.events():
        if e.name() == "[memory]" and str(e.device_type()).rsplit(".", 1)[-1].lower() == device_type:
            events.append((e.start_ns(), e.nbytes()))
    events.sort(key=lambda x: x[0])
    return events


def _start_profiler(prof) -> None:
    with ProfilerNoise():
        prof.__enter__()


def _stop_profiler(prof, failing: bool) -> None:
    """Stop a profiler started here; while the workload's exception is on its
    way, a failure to stop is a warning, never a replacement exception."""
    try:
        with ProfilerNoise():
            prof.__exit__(*(sys.exc_info() if failing else (None, None, None)))
    except Exception as e:
        if not failing:
            raise
        import warnings

        warnings.warn(f"torchscan: could not stop the profiler cleanly: {e}", RuntimeWarning)


def _unreported(result) -> set:
    """Device types of the result's tensors whose allocator reports nothing
    (meta): the peak is unknown there, not zero (as crawl_module(memory=True) says)."""
    from torch.utils._pytree import tree_leaves

    return {t.device.type for t in tree_leaves(result) if isinstance(t, torch.Tensor)} - {"cpu", "cuda"}


def _unsupported(devices) -> list:
    if not devices:
        return []
    return [{"code": "memory_device_unsupported", "severity": "warning", "metric": "peak_memory",
             "message": f"the workload used tensors on {', '.join(sorted(devices))}, which have no allocator "
                        "reports (a meta tensor allocates nothing): memory is measured on cpu and cuda only, so "
                        "peak memory is unavailable"}]


def _cpu_peak(workload, where, devices=frozenset()) -> tuple:
    """(memory evidence, diagnostics) of one call on CPU."""
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    try:
        _start_profiler(prof)
    except RuntimeError as e:  # another profiler is active on this thread
        return None, [{"code": "profiler_unavailable", "severity": "warning", "metric": "peak_memory",
                       "message": f"torch.profiler could not start ({str(e).strip().splitlines()[0]}); "
                                  "peak memory is unavailable"}]
    try:
        result = workload()
    except BaseException:
        _stop_profiler(prof, failing=True)
        raise
    _stop_profiler(prof, failing=False)
    _refuse_unstarted(result, where)
    unreported = _unsupported(devices | _unreported(result))
    del result
    if unreported:
        return None, unreported
    events = _profiler_memory_events(prof, "cpu")
    live = peak = allocated = freed = 0
    allocations = 0
    for _, nbytes in events:
        # The bytes alive of the blocks allocated during the call are never
        # negative. A free that would make them so is of an older block: the
        # CPU allocator's reporter keeps the sizes of blocks it saw while some
        # profiler ran, and a later block at a reused address is freed under
        # that stale size. Held at 0, the figure never exceeds the truth.
        live = max(live + nbytes, 0)
        if nbytes > 0:
            allocated += nbytes
            allocations += 1
        else:
            freed -= nbytes
        peak = max(peak, live)
    return {"device": "cpu", "method": "torch.profiler.profile(profile_memory=True):memory_events",
            "meaning": _CPU_MEANING, "peak_bytes": peak, "allocated_bytes": allocated, "freed_bytes": freed,
            "net_bytes": live, "allocation_events": allocations, "memory_events": len(events)}, []


def _cuda_peak(workload, where, dev, devices=frozenset()) -> tuple:
    torch.cuda.synchronize(dev)
    before = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    result = workload()
    torch.cuda.synchronize(dev)
    _refuse_unstarted(result, where)
    unreported = _unsupported(devices | _unreported(result))
    del result
    if unreported:
        return None, unreported
    peak = torch.cuda.max_memory_allocated(dev) - before
    after = torch.cuda.memory_allocated(dev)
    return {"device": str(dev), "method": "torch.cuda.max_memory_allocated", "meaning": _CUDA_MEANING,
            "peak_bytes": max(peak, 0), "baseline_bytes": before, "net_bytes": after - before,
            "reserved_peak_bytes": torch.cuda.max_memory_reserved(dev)}, []


def _memory(workload, where, dev, devices=frozenset()) -> tuple:
    """devices: device types with no allocator reports that another pass saw the workload use."""
    if dev.type == "cpu":
        evidence, diagnostics = _cpu_peak(workload, where, devices)
    elif dev.type == "cuda":
        evidence, diagnostics = _cuda_peak(workload, where, dev, devices)
    else:
        evidence, diagnostics = None, [{"code": "memory_device_unsupported", "severity": "warning",
                                        "metric": "peak_memory",
                                        "message": f"peak memory on {dev} is not measured (CPU and CUDA only)"}]
    if evidence is None:
        metric = _metric("unavailable", unit="bytes", scope="workload", method="torch.profiler")
    else:
        metric = _metric("complete", evidence["peak_bytes"], unit="bytes", scope="workload",
                         method=evidence["method"])
    return metric, evidence, diagnostics


def measure_peak_memory(workload: Callable[[], Any], *, device=None) -> dict:
    """Run `workload()` once and return its peak memory evidence:
    {"schema_version", "device", "peak_memory" (MetricResult, bytes),
    "memory" (the collector's figures and what they mean), "diagnostics"}.
    device: 'cpu' (default; torch.profiler memory events) or a CUDA device
    (allocator statistics; resets that device's peak statistics)."""
    where = "torchscan.measure_peak_memory"
    _check_workload(workload, where)
    dev = _device(device, where)
    metric, evidence, diagnostics = _memory(workload, where, dev)
    return {"schema_version": SCHEMA_VERSION, "device": str(dev), "peak_memory": metric, "memory": evidence,
            "diagnostics": diagnostics}


def _process_peak_rss() -> tuple:
    try:
        import resource
    except ImportError:
        return _metric("unavailable", unit="bytes", scope="process_lifetime", method="resource.getrusage"), [
            {"code": "process_rss_unavailable", "severity": "warning", "metric": "process_peak_rss",
             "message": "the resource module is not available on this platform"}]
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return _metric("complete", maxrss * scale, unit="bytes", scope="process_lifetime",
                   method="resource.getrusage(RUSAGE_SELF).ru_maxrss"), []


def _profile(workload, where, dev) -> tuple:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    prof = profile(activities=activities)
    try:
        _start_profiler(prof)
    except RuntimeError as e:
        return None, "unavailable", [{"code": "profiler_unavailable", "severity": "warning", "metric": "profile",
                                      "message": f"torch.profiler could not start ({str(e).strip().splitlines()[0]})"}]
    try:
        result = workload()
        sync = _synchronizer(dev)
        if sync is not None:
            sync()
    except BaseException:
        _stop_profiler(prof, failing=True)
        raise
    _stop_profiler(prof, failing=False)
    _refuse_unstarted(result, where)
    del result
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    operators = [{"name": e.key, "calls": e.count, "self_cpu_seconds": e.self_cpu_time_total / 1e6,
                  "cpu_seconds": e.cpu_time_total / 1e6} for e in rows]
    return {"method": "torch.profiler.profile", "activities": [str(a).rsplit(".", 1)[-1] for a in activities],
            "operators": operators, "note": "one profiled call; profiler times include its overhead"}, \
        "complete", []


def measure_workload(workload: Callable[[], Any], *, flops: bool = True, memory: bool = True,
                     latency: bool = False, profile: bool = False, evidence: bool = True,
                     custom_mapping: Optional[Mapping] = None, device=None, warmup: int = 1,
                     min_run_time: float = 0.2, number: Optional[int] = None, repeats: Optional[int] = None,
                     work_units=None, work_unit: Optional[str] = None, num_threads: Optional[int] = None,
                     inputs: Any = None, input_kwargs: Optional[Mapping] = None, progress: bool = False) -> dict:
    """One BenchmarkReport with totals.operator_flops (measure_flops),
    totals.peak_memory (measure_peak_memory), totals.process_peak_rss and,
    with latency=True, the latency totals and timing blocks of
    measure_latency (same options). Each requested measurement runs the
    workload separately, timing first. Omitted measurements are unavailable
    with method not_requested (omitted timing: an empty measurement).
    evidence=True keeps the full FlopReport under "operator_flops", the memory
    figures under "memory" and, with profile=True, the profiler's operator
    table under "profile"; context.profile_status says whether the profile is
    complete, unavailable or not_requested. Errors raised by the workload
    propagate unchanged."""
    where = "torchscan.measure_workload"
    _check_workload(workload, where)
    for name, value in (("flops", flops), ("memory", memory), ("latency", latency), ("profile", profile),
                        ("evidence", evidence)):
        if not isinstance(value, bool):
            raise TypeError(f"{where}: {name} must be True or False, got {type(value).__name__}")
    opts = _latency_options(where, warmup, min_run_time, number, repeats, device, work_units, work_unit,
                            num_threads, input_kwargs)
    dev = opts["dev"]
    context = _context("workload", dev)
    totals = {name: _not_requested(name) for name in _LATENCY_TOTALS + _WORKLOAD_TOTALS}
    totals["throughput"]["unit"] = f"{opts['work_unit']}/second"
    diagnostics = []
    measurement = {}
    report_evidence = {}
    if latency:
        lat_totals, measurement, timing, lat_diagnostics = _latency_part(
            workload, where, progress=functools.partial(_Progress, bool(progress)), **{
                k: opts[k] for k in ("warmup", "min_run_time", "number", "repeats", "dev", "num_threads",
                                     "work_units", "work_unit")})
        totals.update(lat_totals)
        diagnostics += lat_diagnostics
        context["timing"] = timing
        context["work_unit"] = _work_unit_record(opts)
    unreported: frozenset = frozenset()
    if flops:
        from torchscan.flops import FlopScan
        from torchscan.flops import _refuse_unstarted as _refuse_unstarted_flops

        # measure_flops, with memory=True when peak memory is measured too: the
        # scan's memory view says whether the calls ran on meta, which the
        # profiler's memory events cannot (a meta tensor allocates nothing).
        scan = FlopScan(custom_mapping, memory=memory)
        _refuse_unstarted_flops(scan._run(workload))
        flop_report = scan.report()
        if memory:
            # "tensors on meta have no allocator reports ..." (torchscan_dispatch/analyses/memory_view.cc)
            unreported = frozenset(re.findall(r"tensors on (\w+) have no allocator reports", " ".join(
                d.get("message", "") for d in scan.memory_report().get("diagnostics", [])
                if d.get("code") == "memory_device_unsupported")))
        totals["operator_flops"] = flop_report["total"]
        diagnostics += flop_report["diagnostics"]
        report_evidence["operator_flops"] = flop_report
    elif custom_mapping is not None:
        raise ValueError(f"{where}: custom_mapping applies to FLOP counting; pass flops=True or drop it")
    if memory:
        totals["peak_memory"], memory_evidence, memory_diagnostics = _memory(workload, where, dev, unreported)
        diagnostics += memory_diagnostics
        report_evidence["memory"] = memory_evidence
    if profile:
        profile_evidence, context["profile_status"], profile_diagnostics = _profile(workload, where, dev)
        diagnostics += profile_diagnostics
        report_evidence["profile"] = profile_evidence
    else:
        context["profile_status"] = "not_requested"
    totals["process_peak_rss"], rss_diagnostics = _process_peak_rss()
    diagnostics += rss_diagnostics
    report = {"schema_version": SCHEMA_VERSION, "context": context, "inputs": _inputs(inputs, input_kwargs),
              "measurement": measurement, "totals": totals, "diagnostics": diagnostics}
    if evidence:
        report.update(report_evidence)
    return report
