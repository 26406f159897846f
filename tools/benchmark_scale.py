"""Part f of tools/benchmark.py (which runs it): memory per call, 10^6 calls
of torch.add in one full scan and in one streaming scan, each in a fresh
process: resident-memory growth per call, calls still held, and the time to
build the reports. Nothing is asserted."""

from __future__ import annotations

import json
import sys
from typing import Any, Dict

from benchmark_common import REPO


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



def _print_scale(sc: Dict[str, Any]) -> None:
    print(f"[f] memory per call: {sc['calls']:,} calls of torch.add on 4-element tensors in one scan, "
          f"each mode in a fresh process")
    for mode in ("full", "streaming"):
        m = sc[mode]
        print(f"      {mode:<10} RSS +{m['rss_growth_bytes'] / 2**20:7.1f} MiB = {m['bytes_per_call']:6.1f} B/call   "
              f"held {m['held_calls']:>9,} calls   FlopReport {m['flop_report_s']:.3f} s   "
              f"scan report {m['scan_report_s']:.3f} s")
