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

import inspect
import math
import numbers
import os
import platform
import re
import sys
import time
from collections.abc import Mapping as _MappingABC
from typing import Any, Callable, List, Mapping, Optional

import torch

from torchscan._profiler_noise import ProfilerNoise

# The reports' reading side (validation, comparison, rendering) lives in
# torchscan.benchmark_reports; these names stay importable from here.
from torchscan.benchmark_reports import (SCHEMA_VERSION, _STATUSES, _block_statistics, _quantile,  # noqa: F401
                                         compare_benchmarks, is_benchmark_comparison, is_benchmark_report,
                                         render_benchmark, validate_benchmark_comparison,
                                         validate_benchmark_report)
from torchscan.metadata import describe

__all__ = ["measure_latency", "measure_peak_memory", "measure_workload", "compare_benchmarks",
           "render_benchmark", "is_benchmark_report", "is_benchmark_comparison"]

_LATENCY_TOTALS = ("first_call_latency", "latency", "latency_iqr", "throughput")
_WORKLOAD_TOTALS = ("operator_flops", "peak_memory", "process_peak_rss")
_TIMER_METHOD = "blocked_timer"  # torch.utils.benchmark.Timer.blocked_autorange semantics
_IQR_WARN = 0.1  # torch.utils.benchmark's _IQR_WARN_THRESHOLD: IQR above 10% of the median
_PROGRESS_AFTER = 3.0  # seconds of timing before a progress line appears


def _metric(status: str, value=None, *, unit: str, scope: str, method: str = "not_requested") -> dict:
    return {"status": status, "value": value if status == "complete" else None,
            "known_value": value if status != "unavailable" else None,
            "unit": unit, "scope": scope, "method": method}


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


# ---------------------------------------------------------------- argument checks


def _check_workload(workload, where: str) -> None:
    if not callable(workload):
        raise TypeError(f"{where}(workload): workload must be a zero-argument callable such as "
                        f"lambda: model(x), got {type(workload).__name__}")


def _refuse_unstarted(result, where: str) -> None:
    """A generator or coroutine returned by the workload ran none of its body."""
    if inspect.iscoroutine(result) or inspect.isgenerator(result):
        result.close()
        raise TypeError(f"{where}(workload): workload() returned a {type(result).__name__}, so none of its body "
                        "ran; pass a function that does the work, e.g. lambda: list(gen()) or "
                        "lambda: asyncio.run(coro())")
    if inspect.isasyncgen(result):
        raise TypeError(f"{where}(workload): workload() returned an async generator, so none of its body ran; "
                        "pass a plain function that runs it to the end")


def _int_arg(value, name: str, where: str, minimum: int, allow_none: bool = False) -> Optional[int]:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        none = " or None" if allow_none else ""
        raise TypeError(f"{where}: {name} must be an int >= {minimum}{none}, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{where}: {name} must be >= {minimum}, got {value}")
    return int(value)


def _positive_real(value, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where}: {name} must be a positive number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where}: {name} must be a positive finite number, got {value}")
    return value


def _device(device, where: str) -> torch.device:
    if device is None:
        return torch.device("cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"{where}: device must be a string such as 'cpu' or 'cuda:0', or a torch.device; "
                        f"got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"{where}: device {device!r} is not a device name ({e}); use e.g. 'cpu' or 'cuda:0'") \
            from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{where}: device {str(dev)!r} is not available here (torch.cuda.is_available() is "
                             "False); pass device='cpu'")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        elif dev.index >= torch.cuda.device_count():
            raise ValueError(f"{where}: device {str(dev)!r} does not exist ({torch.cuda.device_count()} CUDA "
                             "devices)")
    elif dev.type != "cpu":
        module = getattr(torch, dev.type, None)
        if module is None or not hasattr(module, "synchronize") or not module.is_available():
            raise ValueError(f"{where}: device {str(dev)!r} is not supported or not available; pass 'cpu' or "
                             "'cuda'")
    return dev


def _synchronizer(dev: torch.device) -> Optional[Callable[[], None]]:
    """The explicit synchronisation of the selected device (None for CPU,
    whose work is finished when the call returns)."""
    if dev.type == "cpu":
        return None
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    return getattr(torch, dev.type).synchronize


def _sync_name(dev: torch.device) -> str:
    if dev.type == "cpu":
        return "none (CPU work is complete when the call returns)"
    if dev.type == "cuda":
        return f"torch.cuda.synchronize({str(dev)!r}) before and after every first call and block"
    return f"torch.{dev.type}.synchronize() before and after every first call and block"


def _work_unit(work_units, work_unit, where: str) -> tuple:
    if work_units is None:
        work_units = 1
    elif isinstance(work_units, bool) or not isinstance(work_units, numbers.Real):
        raise TypeError(f"{where}: work_units (work units per workload call, e.g. the batch size) must be a "
                        f"positive number, got {type(work_units).__name__}")
    if not math.isfinite(float(work_units)) or work_units <= 0:
        raise ValueError(f"{where}: work_units must be a positive finite number (work per workload call), "
                         f"got {work_units}")
    if work_unit is None:
        work_unit = "calls" if work_units == 1 else "units"
    if not isinstance(work_unit, str) or not work_unit.strip():
        raise TypeError(f"{where}: work_unit must be a non-empty name such as 'samples' or 'tokens', "
                        f"got {work_unit!r}")
    return (int(work_units) if isinstance(work_units, numbers.Integral) else float(work_units)), work_unit


# ---------------------------------------------------------------- context


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _context(kind: str, dev: torch.device) -> dict:
    import torchscan

    hardware = {"platform": platform.platform(), "machine": platform.machine(), "cpu": _cpu_model(),
                "cpu_count": os.cpu_count(), "device_name": None}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        hardware["device_name"] = props.name
        hardware["device_memory_bytes"] = props.total_memory
        hardware["device_capability"] = f"{props.major}.{props.minor}"
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "torchscan_version": torchscan.__version__, "torch_version": torch.__version__,
        "python_version": platform.python_version(), "measurement": kind, "device": str(dev),
        "hardware": hardware,
        "software": {"torch_git_version": torch.version.git_version, "torch_debug_build": bool(torch.version.debug),
                     "cuda": torch.version.cuda, "cudnn": cudnn, "mkldnn": torch.backends.mkldnn.is_available(),
                     "python_implementation": platform.python_implementation()},
        "threads": {"torch_num_threads": torch.get_num_threads(),
                    "torch_num_interop_threads": torch.get_num_interop_threads(),
                    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                    "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS")},
        # The caller's state when the measurement started; the workload owns
        # grad mode, autocast and the rest while it runs.
        "execution_state": {"grad_enabled": torch.is_grad_enabled(),
                            "inference_mode": torch.is_inference_mode_enabled(),
                            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
                            "float32_matmul_precision": torch.get_float32_matmul_precision()},
        "timing": None,
        "work_unit": None,
    }


def _inputs(inputs, input_kwargs) -> dict:
    if inputs is None and not input_kwargs:
        return {"source": "none", "args": describe(()), "kwargs": describe({})}
    args = inputs if isinstance(inputs, tuple) else (() if inputs is None else (inputs,))
    return {"source": "caller", "args": describe(args), "kwargs": describe(dict(input_kwargs or {}))}


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


def _time_latency(workload, where, *, warmup, min_run_time, number, repeats, dev, progress) -> tuple:
    """First call, warmup and blocks; returns (first_call_seconds, timing)."""
    sync = _synchronizer(dev)
    clock = time.perf_counter

    def block(n: int) -> float:
        if sync is not None:
            sync()
        start = clock()
        for _ in range(n):
            workload()
        if sync is not None:
            sync()
        return max(clock() - start, 1e-9)  # as Timer: no zero durations

    if sync is not None:
        sync()
    start = clock()
    result = workload()
    if sync is not None:
        sync()
    first = clock() - start
    _refuse_unstarted(result, where)
    del result
    for _ in range(warmup):
        workload()
    estimation_calls = 0
    if number is None:
        # Timer._estimate_block_size: the clock's own overhead (median of 5
        # empty blocks), then x10 until the overhead is <= 1e-4 of a block
        # and a block lasts >= min_run_time / 1000, or a block exceeds
        # min_run_time. These calls also warm up, as in Timer.
        overhead = sorted(block(0) for _ in range(5))[2]
        number = 1
        while True:
            taken = block(number)
            estimation_calls += number
            if overhead / taken <= 1e-4 and taken >= min_run_time / 1000:
                break
            if taken > min_run_time or number * 10 > 2147483647:
                break
            number *= 10
    shown = _Progress(progress, min_run_time)
    raw: List[float] = []
    total = 0.0
    try:
        while (len(raw) < repeats) if repeats is not None else (total < min_run_time):
            t = block(number)
            raw.append(t)
            total += t
            shown.block(len(raw), total)
    finally:
        shown.done()
    return first, {"number_per_run": number, "raw_times_seconds": raw, "measured_calls": number * len(raw),
                   "warmup_calls": warmup, "block_size_estimation_calls": estimation_calls}


def _latency_part(workload, where, *, warmup, min_run_time, number, repeats, dev, num_threads, work_units,
                  work_unit, progress) -> tuple:
    """(totals, measurement, timing options, diagnostics) of the latency part."""
    previous = torch.get_num_threads()
    try:
        if num_threads is not None:
            torch.set_num_threads(num_threads)  # as Timer(num_threads=...), restored below
        threads = torch.get_num_threads()
        first, measurement = _time_latency(workload, where, warmup=warmup, min_run_time=min_run_time,
                                           number=number, repeats=repeats, dev=dev, progress=progress)
    finally:
        if num_threads is not None:
            torch.set_num_threads(previous)
    stats = _block_statistics(measurement["raw_times_seconds"], measurement["number_per_run"])
    measurement.update({"first_call_seconds": first,
                        "block_averages_seconds": [t / measurement["number_per_run"]
                                                   for t in measurement["raw_times_seconds"]],
                        "median_seconds": stats["median"], "q1_seconds": stats["q1"], "q3_seconds": stats["q3"],
                        "iqr_seconds": stats["iqr"], "mean_seconds": stats["mean"]})
    method = f"{_TIMER_METHOD}:median_of_block_averages"
    totals = {
        "first_call_latency": _metric("complete", first, unit="seconds", scope="first_call", method="wall_clock"),
        "latency": _metric("complete", stats["median"], unit="seconds", scope="call", method=method),
        "latency_iqr": _metric("complete", stats["iqr"], unit="seconds", scope="call",
                               method=f"{_TIMER_METHOD}:iqr_of_block_averages"),
        "throughput": _metric("complete", work_units / stats["median"], unit=f"{work_unit}/second", scope="call",
                              method=f"{_TIMER_METHOD}:work_units_per_median_call"),
    }
    timing = {"timer": "time.perf_counter", "semantics": "torch.utils.benchmark.Timer.blocked_autorange",
              "synchronization": _sync_name(dev), "warmup_calls": warmup, "min_run_time_seconds": min_run_time,
              "number": number, "repeats": repeats, "num_threads": threads,
              "block_size": "given" if number is not None else "estimated as Timer._estimate_block_size",
              "stop_rule": (f"exactly {repeats} blocks" if repeats is not None
                            else "blocks until their total time reaches min_run_time"),
              "statistics": "median and IQR of block averages (linear interpolation quantiles)"}
    diagnostics = []
    blocks = len(measurement["raw_times_seconds"])
    if blocks < 4:
        diagnostics.append({"code": "few_timing_blocks", "severity": "warning", "metric": "latency_iqr",
                            "message": f"only {blocks} timing blocks: the quartiles interpolate between fewer "
                                       "than four block averages; raise min_run_time or repeats"})
    if stats["median"] > 0 and stats["iqr"] / stats["median"] > _IQR_WARN:
        diagnostics.append({"code": "high_latency_variation", "severity": "warning", "metric": "latency",
                            "message": f"the IQR is {100 * stats['iqr'] / stats['median']:.1f}% of the median "
                                       "(torch.utils.benchmark warns above 10%): the machine was probably busy"})
    return totals, measurement, timing, diagnostics


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
    totals, measurement, timing, diagnostics = _latency_part(workload, where, progress=bool(progress), **{
        k: opts[k] for k in ("warmup", "min_run_time", "number", "repeats", "dev", "num_threads", "work_units",
                             "work_unit")})
    context["timing"] = timing
    context["work_unit"] = _work_unit_record(opts)
    return {"schema_version": SCHEMA_VERSION, "context": context, "inputs": _inputs(inputs, input_kwargs),
            "measurement": measurement, "totals": totals, "diagnostics": diagnostics}


def _latency_options(where, warmup, min_run_time, number, repeats, device, work_units, work_unit, num_threads,
                     input_kwargs) -> dict:
    if input_kwargs is not None and not isinstance(input_kwargs, _MappingABC):
        raise TypeError(f"{where}: input_kwargs must be a mapping of keyword-argument metadata, "
                        f"got {type(input_kwargs).__name__}")
    units, unit = _work_unit(work_units, work_unit, where)
    return {"warmup": _int_arg(warmup, "warmup", where, 0),
            "min_run_time": _positive_real(min_run_time, "min_run_time", where),
            "number": _int_arg(number, "number", where, 1, allow_none=True),
            "repeats": _int_arg(repeats, "repeats", where, 1, allow_none=True),
            "dev": _device(device, where),
            "num_threads": _int_arg(num_threads, "num_threads", where, 1, allow_none=True),
            "work_units": units, "work_unit": unit}


def _work_unit_record(opts) -> dict:
    return {"name": opts["work_unit"], "units_per_call": opts["work_units"],
            "definition": f"one workload call processes {opts['work_units']} {opts['work_unit']}; throughput is "
                          f"{opts['work_units']} / median latency"}


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
            workload, where, progress=bool(progress), **{
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
