"""The main job: the summary of a built-in example model.

    python3 tools/demo.py [--json PATH]

Crawls one eval forward of torchscan.examples.small_cnn() on a (1, 3, 32, 32)
input, prints the per-layer summary (module view: FLOPs, MACs, DMAs; the
memory each layer call adds; both FLOP views in the footer), then the operator-view FlopReport (FLOPs per operator,
the zero-cost operators, every diagnostic).
"""

import argparse
import json

import torch

import torchscan
from torchscan.examples import small_cnn


def print_report(report: dict) -> None:
    total = report["total"]
    value = total["value"] if total["status"] == "complete" else total["known_value"]
    bound = "" if total["status"] == "complete" else " (lower bound: some work has no formula)"
    print(f"TorchScan {report['context']['torchscan_version']} on torch {report['context']['torch_version']}")
    print(f"operator FLOPs: {value:,} [{total['status']}]{bound}")
    print(f"convention: {report['context']['counting_convention']}")
    print("\nFLOPs by operator:")
    for op, flops in sorted(report["by_operator"].items(), key=lambda kv: -kv[1]):
        print(f"  {op:<40} {flops:>15,}")
    print("\nzero-cost operators (calls, reason):")
    for op, info in sorted(report["ignored_operators"].items()):
        print(f"  {op:<40} {info['calls']:>6}  {info['reason']}")
    print(f"\ndiagnostics ({len(report['diagnostics'])}):")
    for d in report["diagnostics"]:
        print(f"  [{d['code']}] {d['message']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the report as JSON to this path")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = small_cnn().eval()
    x = torch.randn(1, 3, 32, 32)
    # Per-layer table: both views, and the memory each layer call adds.
    analysis = torchscan.summary(model, args=(x,), memory=True)
    print()
    report = analysis["operator_flops"]
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(analysis, f, indent=2, sort_keys=True)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
