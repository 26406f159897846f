"""What the benchmark's parts share (tools/benchmark.py and the part modules
benchmark_overhead.py, benchmark_crawl.py, benchmark_scale.py, benchmark_peers.py):
the repository root, the clock, the arms' names and their interleaving."""

from __future__ import annotations

import contextlib
import gc
import itertools
import statistics
import time
from pathlib import Path
from typing import List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]

ns = time.perf_counter_ns

UNSCANNED = "unscanned"
TORCHSCAN = "torchscan"
FCM = "flop_counter_mode"
TRACE = "torchscan_trace"  # a scan that also times every call (scan(trace=True)); part a only


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def _arm_orders(arms: Sequence[str]) -> List[List[str]]:
    """All permutations, ordered so consecutive repeats alternate direction."""
    perms = [list(p) for p in itertools.permutations(arms)]
    out: List[List[str]] = []
    for p in perms:
        if p not in out:
            out.append(p)
            rev = list(reversed(p))
            if rev not in out:
                out.append(rev)
    return out


@contextlib.contextmanager
def _gc_paused():
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _fmt_ratio(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.3f}x"
