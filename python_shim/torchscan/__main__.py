"""TorchScan's command line.

    python3 -m torchscan scan MODULE:FACTORY --input-shape 3,224,224 [--output report.json]
                                             [--mode full|structure] [--max-depth N]
    python3 -m torchscan render report.json [--max-depth N]
    python3 -m torchscan diff before.json after.json [--output diff.json]

`scan` imports MODULE, calls FACTORY() for the model, crawls one forward on a
generated input (a batch of one) and prints the summary; `render` prints a
saved report without measuring; `diff` compares two saved AnalysisReports.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import List, Optional

import torchscan


def _factory(spec: str):
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"torchscan scan: expected MODULE:FACTORY (e.g. torchscan.examples:small_cnn), got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise SystemExit(f"torchscan scan: cannot load {spec}: {e}") from None
    return factory


def _shape(text: str):
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise SystemExit(f"torchscan scan: --input-shape takes comma-separated integers, got {text!r}") from None


def _load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m torchscan", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    scan = sub.add_parser("scan", help="crawl a model built by MODULE:FACTORY")
    scan.add_argument("factory")
    scan.add_argument("--input-shape", required=True, type=_shape)
    scan.add_argument("--output")
    scan.add_argument("--mode", default="full", choices=("full", "structure"))
    scan.add_argument("--max-depth", type=int)
    render = sub.add_parser("render", help="print a saved report")
    render.add_argument("report")
    render.add_argument("--max-depth", type=int)
    diff = sub.add_parser("diff", help="compare two saved AnalysisReports")
    diff.add_argument("before")
    diff.add_argument("after")
    diff.add_argument("--output")
    args = parser.parse_args(argv)

    if args.command == "scan":
        model = _factory(args.factory)()
        report = torchscan.crawl_module(model, args.input_shape, mode=args.mode)
        print(torchscan.render_report(report, args.max_depth))
        if args.output:
            with open(args.output, "w") as f:
                json.dump(report, f, indent=1, sort_keys=True)
    elif args.command == "render":
        print(torchscan.render_report(_load(args.report), args.max_depth))
    else:
        result = torchscan.compare_reports(_load(args.before), _load(args.after))
        text = json.dumps(result, indent=1, sort_keys=True)
        if args.output:
            with open(args.output, "w") as f:
                f.write(text)
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
