"""TorchScan: what a PyTorch model call costs, counted inside the dispatcher."""

import functools as _functools

from torchscan._summary import SummaryReport
from torchscan.crawler import compare_reports, crawl_module, summary
from torchscan.distributed import distributed_context, merge_reports, render_job_report
from torchscan.crawler import render_report as _render_model_report
from torchscan.flops import FlopScan, measure_flops, scan, tls_mode_included
from torchscan.handlers import ModuleHandler
from torchscan.roofline import RooflineReport, compare_kernelbench, list_gpus, render_roofline, roofline
from torchscan.workload import (compare_benchmarks, measure_latency, measure_peak_memory, measure_workload,
                                render_benchmark)
from torchscan.workload import is_benchmark_comparison as _is_benchmark_comparison
from torchscan.workload import is_benchmark_report as _is_benchmark_report

__version__ = "0.3.0"


@_functools.wraps(_render_model_report)
def render_report(report, max_depth=None, receptive_field=False) -> str:
    # BenchmarkReport / BenchmarkComparison dicts render in Python
    # (torchscan.workload.render_benchmark); AnalysisReport and FlopReport in C++.
    if _is_benchmark_report(report) or _is_benchmark_comparison(report):
        return render_benchmark(report)
    return _render_model_report(report, max_depth, receptive_field)


render_report.__doc__ = (_render_model_report.__doc__ or "") + (
    "\n    A BenchmarkReport or BenchmarkComparison (measure_latency, measure_workload, compare_benchmarks)\n"
    "    renders as text with seconds in ms and bytes in MiB (max_depth and receptive_field do not apply).")

__all__ = ["FlopScan", "compare_benchmarks", "compare_reports", "crawl_module", "distributed_context",
           "measure_flops", "merge_reports", "render_job_report",
           "measure_latency", "measure_peak_memory", "measure_workload", "ModuleHandler", "render_benchmark", "render_report",
           "RooflineReport", "compare_kernelbench", "list_gpus", "render_roofline", "roofline",
           "scan", "summary", "SummaryReport", "tls_mode_included", "__version__"]
