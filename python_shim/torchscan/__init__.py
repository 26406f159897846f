"""TorchScan: what a PyTorch model call costs, counted inside the dispatcher."""

from torchscan.crawler import compare_reports, crawl_module, render_report, summary
from torchscan.flops import FlopScan, measure_flops, scan, tls_mode_included

__version__ = "0.1.0"

__all__ = ["FlopScan", "compare_reports", "crawl_module", "measure_flops", "render_report", "scan", "summary",
           "tls_mode_included", "__version__"]
