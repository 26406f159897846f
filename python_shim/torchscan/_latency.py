"""Latency timing of one workload (torchscan.workload, "What each number
means": latency, latency_iqr, first_call_latency, throughput): the first
call, the warmup, the blocks as torch.utils.benchmark.Timer.blocked_autorange
sizes and runs them, and the statistics, timing record and diagnostics the
BenchmarkReport takes from them.
"""

from __future__ import annotations

import time
from typing import List

import torch

from torchscan._metric import metric as _metric
from torchscan._workload_setup import _refuse_unstarted, _sync_name, _synchronizer
from torchscan.benchmark_reports import _block_statistics

_TIMER_METHOD = "blocked_timer"  # torch.utils.benchmark.Timer.blocked_autorange semantics
_IQR_WARN = 0.1  # torch.utils.benchmark's _IQR_WARN_THRESHOLD: IQR above 10% of the median


def _time_latency(workload, where, *, warmup, min_run_time, number, repeats, dev, progress) -> tuple:
    """First call, warmup and blocks; returns (first_call_seconds, timing).
    progress(min_run_time) makes, when the blocks start, what is told of each
    block (.block(blocks, total_seconds)) and of their end (.done()):
    torchscan.workload's progress line."""
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
    shown = progress(min_run_time)
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
