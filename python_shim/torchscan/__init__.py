"""TorchScan: what a PyTorch model call costs, counted inside the dispatcher."""

from torchscan.crawler import crawl_module
from torchscan.flops import FlopScan, measure_flops, scan, tls_mode_included

__version__ = "0.1.0"

__all__ = ["FlopScan", "crawl_module", "measure_flops", "scan", "tls_mode_included", "__version__"]
