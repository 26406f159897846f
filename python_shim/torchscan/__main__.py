"""TorchScan's command line.

    python3 -m torchscan scan MODULE:FACTORY --input-shape 3,224,224 [--output report.json]
                                             [--mode full|structure] [--max-depth N]
    python3 -m torchscan render report.json [--max-depth N]
    python3 -m torchscan diff before.json after.json [--json] [--output diff.json]
    python3 -m torchscan bench MODULE:FACTORY --input-shape 3,224,224 [--batch-size N] [--output bench.json]
                                              [--min-run-time S] [--warmup N] [--threads N]
    python3 -m torchscan compare before.json after.json [--outputs-checked] [--output comparison.json]
    python3 -m torchscan merge rank0.json rank1.json ... [--output job.json]
    python3 -m torchscan roofline MODULE:FACTORY --input-shape 3,224,224 [--gpu h100-sxm] [--precision fp32]
                                                 [--actual-ms MS] [--device meta] [--plot roofline.svg] [--output r.json]

`scan` imports MODULE, calls FACTORY() for the model, crawls one forward on a
generated input (a batch of one) and prints the summary; `render` prints any
saved TorchScan document without measuring (an AnalysisReport, FlopReport,
ReportDiff, C++ scan report, BenchmarkReport or comparison, job report or
RooflineReport); `diff` compares two saved reports of the same kind (two
AnalysisReports, or two FlopReports) and prints a table (--json: the
ReportDiff JSON; --output always writes the JSON, which `render` reads). `bench` times the model on a
generated input (batch --batch-size, default 1) and measures its operator
FLOPs, peak memory and process peak RSS (a BenchmarkReport); `compare` prints
the BenchmarkComparison of two saved BenchmarkReports (deltas only with
--outputs-checked: you state that you checked the two models' outputs agree).
`merge` combines one report per rank of a torch.distributed job (the same
kind on every rank) into a job report: per-rank totals, their sum, the
slowest rank and the imbalance (max / mean).

A problem with a file (missing, not a regular file, unreadable, not JSON,
a key repeated in one object, not a valid report or a report of another kind,
an --output that cannot be written) or a factory that does not return a
module ends the command with a one-line message naming the file (and, for
diff, which side) and exit status 1.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import stat
import sys
from typing import List, NoReturn, Optional

import torch

import torchscan
from torchscan import _readers
from torchscan.crawler import _compare_json_text, _render_json_text


def _fail(command: str, message: str) -> NoReturn:
    # SystemExit with a message: printed to stderr, exit status 1, no traceback.
    raise SystemExit(f"torchscan {command}: {message}")


def _name(path: str) -> str:
    """A path as printable text (undecodable bytes from argv escaped)."""
    return path.encode("utf-8", "backslashreplace").decode("utf-8")


def _factory(command: str, spec: str):
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        _fail(command, f"expected MODULE:FACTORY (e.g. torchscan.examples:small_cnn), got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        _fail(command, f"cannot load {spec}: {e}")
    return factory


def _raised(command: str, what: str, e: Exception) -> NoReturn:
    """The model's (or factory's) exception as the command's one line: its
    type and first line (call the API from Python for the traceback)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if isinstance(e, (TypeError, ValueError)) and text.startswith("torchscan."):
        _fail(command, text.split(": ", 1)[-1])  # TorchScan's own refusal, already one line
    _fail(command, f"{what} raised {type(e).__name__}{': ' + text[:300] if text else ''}")


def _model(command: str, spec: str):
    """FACTORY() of MODULE:FACTORY, refused unless it is an nn.Module."""
    factory = _factory(command, spec)
    try:
        model = factory()
    except Exception as e:
        _raised(command, f"{spec}()", e)
    if not isinstance(model, torch.nn.Module):
        _fail(command, f"{spec} returned {type(model).__name__}, not a torch.nn.Module; FACTORY must build the "
                       "model (e.g. torchscan.examples:small_cnn)")
    return model


def _shape(text: str):
    try:
        shape = tuple(int(x) for x in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(d < 0 for d in shape):
        raise SystemExit(f"torchscan: --input-shape takes comma-separated non-negative integers, got {text!r}")
    return shape


def _read_report(command: str, path: str, side: Optional[str] = None) -> str:
    """The text of a report file; file-level problems end the command. JSON
    syntax and schema are checked by the C++ loader, which names the file."""
    what = f"the {side} report {_name(path)}" if side else f"the report {_name(path)}"
    try:
        # Opened without blocking (a FIFO would wait for a writer), then
        # read only when it is a regular file.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(path)
            if not stat.S_ISREG(mode):
                kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else \
                    "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
                _fail(command, f"{what} is {kind}, not a report file; save the report to a file first")
            data = f.read()
    except FileNotFoundError:
        _fail(command, f"{what} does not exist")
    except IsADirectoryError:
        _fail(command, f"{what} is a directory, not a report file")
    except PermissionError:
        _fail(command, f"{what} cannot be read (permission denied)")
    except OSError as e:
        _fail(command, f"{what} cannot be read ({e.strerror or e})")
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark is harmless
    except UnicodeDecodeError as e:
        _fail(command, f"{what} is not JSON (not UTF-8 text: byte {e.start} is 0x{data[e.start]:02x})")
    if not text.strip():
        _fail(command, f"{what} is empty, not a JSON report")
    return text


def _check_output(command: str, path: str) -> None:
    """Refuse an --output that cannot be written, before any work is done."""
    name = _name(path)
    if os.path.isdir(path):
        _fail(command, f"--output {name} is a directory; give a file name, e.g. {os.path.join(name, 'report.json')}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(parent):
        _fail(command, f"--output {name}: the directory {_name(parent)} does not exist; create it first")
    if not os.path.isdir(parent):
        _fail(command, f"--output {name}: {_name(parent)} is not a directory")
    if os.path.exists(path):
        if not stat.S_ISREG(os.stat(path).st_mode):
            # Writing to a FIFO would wait for a reader; a device is no report file.
            _fail(command, f"--output {name} exists and is not a regular file; give a file name")
        if not os.access(path, os.W_OK):
            _fail(command, f"--output {name} exists and is not writable")
    elif not os.access(parent, os.W_OK | os.X_OK):
        _fail(command, f"--output {name}: the directory {_name(parent)} is not writable")


def _write_output(command: str, path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        _fail(command, f"cannot write --output {_name(path)} ({e.strerror or e})")


def _reader_error(command: str, e: Exception) -> NoReturn:
    """A report reader's ValueError as the command's one-line message."""
    message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    for prefix in ("torchscan.render_report: ", "torchscan.compare_reports: "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    _fail(command, message)


def _reader_message(e: Exception) -> str:
    message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return message.split(": ", 1)[1] if message.startswith("torchscan.") and ": " in message else message


def _load(command: str, path: str, text: str, side: Optional[str] = None):
    """The parsed report text (torchscan._readers rules: no repeated keys, no
    absurd nesting); problems end the command, naming the file."""
    what = f"the {side} report {_name(path)}" if side else f"the report {_name(path)}"
    try:
        return _readers.loads(text, what)
    except ValueError as e:
        _fail(command, str(e))


def _bench(args) -> None:
    import torch

    for name, value, minimum in (("--batch-size", args.batch_size, 1), ("--warmup", args.warmup, 0),
                                 ("--threads", args.threads, 1)):
        if value is not None and value < minimum:
            _fail("bench", f"{name} must be >= {minimum}, got {value}")
    if not args.min_run_time > 0:
        _fail("bench", f"--min-run-time must be a positive number of seconds, got {args.min_run_time}")
    if args.output:
        _check_output("bench", args.output)  # before the model is built or run
    model = _model("bench", args.factory)
    model.eval()
    x = torch.randn(args.batch_size, *args.input_shape)

    def workload():
        with torch.inference_mode():
            return model(x)

    try:
        report = torchscan.measure_workload(workload, latency=True, min_run_time=args.min_run_time,
                                            warmup=args.warmup, num_threads=args.threads, inputs=(x,),
                                            work_units=args.batch_size, work_unit="samples", progress=True)
    except Exception as e:
        _raised("bench", "the model", e)
    report["inputs"]["source"] = "generated"
    print(torchscan.render_benchmark(report))
    if args.output:
        _write_output("bench", args.output, json.dumps(report, indent=1, sort_keys=True))


def _compare(args) -> None:
    if args.output:
        _check_output("compare", args.output)
    reports = []
    for side, path in (("before", args.before), ("after", args.after)):
        reports.append(_load("compare", path, _read_report("compare", path, side), side))
    try:
        result = torchscan.compare_benchmarks(reports[0], reports[1], check=True if args.outputs_checked else None)
    except (TypeError, ValueError) as e:
        _fail("compare", _reader_message(e))
    if args.output:
        _write_output("compare", args.output, json.dumps(result, indent=1, sort_keys=True))
    print(torchscan.render_benchmark(result))


def _roofline(args) -> None:
    for path in (args.output, args.plot):
        if path:
            _check_output("roofline", path)
    model = _model("roofline", args.factory)
    try:
        model = model.to(args.device).eval()
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
        x = torch.rand((1, *args.input_shape), dtype=dtype, device=args.device)
    except Exception as e:
        _raised("roofline", f"building the model and its input on --device {args.device}", e)
    try:
        report = torchscan.roofline(model, x, gpu=args.gpu, precision=args.precision, actual_ms=args.actual_ms)
    except Exception as e:
        _raised("roofline", "the model", e)
    print(report.render())
    if args.plot:
        _write_output("roofline", args.plot, report.to_svg())
    if args.output:
        _write_output("roofline", args.output, json.dumps(report, indent=1, sort_keys=True))


def _merge(args) -> None:
    from torchscan.distributed import merge_reports, render_job_report

    if args.output:
        _check_output("merge", args.output)
    reports, names = [], []
    for path in args.reports:
        reports.append(_load("merge", path, _read_report("merge", path)))
        names.append(_name(path))
    try:
        job = merge_reports(reports, names)
    except (TypeError, ValueError) as e:
        _fail("merge", _reader_message(e))
    if args.output:
        _write_output("merge", args.output, json.dumps(job, indent=1, sort_keys=True))
    print(render_job_report(job))


def _other_renderer(value):
    """The Python renderer of a parsed document the library's renderer does
    not read (None: leave it to the library, which reads AnalysisReports and
    FlopReports and names every problem with them)."""
    from torchscan import _tables
    from torchscan.distributed import render_job_report
    from torchscan.workload import is_benchmark_comparison, is_benchmark_report

    if is_benchmark_report(value) or is_benchmark_comparison(value):
        return torchscan.render_benchmark
    if _tables.is_report_diff(value):
        return _tables.render_diff
    if _tables.is_scan_report(value):
        return _tables.render_scan_report
    if isinstance(value, dict) and value.get("kind") == "torchscan_job_report":
        return render_job_report
    context = value.get("context") if isinstance(value, dict) else None
    if isinstance(context, dict) and context.get("kind") == "torchscan_roofline":
        return torchscan.render_roofline
    return None


def _render(args) -> None:
    text = _read_report("render", args.report)
    try:
        value = _readers.loads(text)
    except ValueError:
        value = None  # the library's reader names the JSON problem, with its position
    renderer = _other_renderer(value) if value is not None else None
    if renderer is not None:
        try:
            print(renderer(value), end="" if renderer is not torchscan.render_benchmark else "\n")
        except (TypeError, ValueError) as e:
            _fail("render", f"the report {_name(args.report)}: {_reader_message(e)}")
        return
    try:
        print(_render_json_text(text, args.max_depth, file=_name(args.report)))
    except (ValueError, RuntimeError) as e:
        _reader_error("render", e)


def _diff(args) -> None:
    from torchscan._tables import render_diff

    if args.output:
        _check_output("diff", args.output)
    before = _read_report("diff", args.before, "before")
    after = _read_report("diff", args.after, "after")
    try:
        result = json.loads(_compare_json_text(before, after, _name(args.before), _name(args.after)))
    except (ValueError, RuntimeError) as e:
        _reader_error("diff", e)
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.output:
        _write_output("diff", args.output, text)
    print(text if args.json else render_diff(result), end="\n" if args.json else "")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m torchscan", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    factory_help = ("MODULE:FACTORY: an importable module and a function in it that takes no arguments and returns "
                    "the torch.nn.Module to measure (e.g. torchscan.examples:small_cnn)")
    shape_help = ("shape of one input without the batch dimension, comma-separated positive integers "
                  "(e.g. 3,224,224 for an image, 128 for a vector)")

    def output_help(what):
        return f"also write {what} as JSON to this file"

    scan = sub.add_parser("scan", help="crawl one forward of a model built by MODULE:FACTORY and print its summary")
    scan.add_argument("factory", metavar="MODULE:FACTORY", help=factory_help)
    scan.add_argument("--input-shape", required=True, type=_shape, metavar="SHAPE",
                      help=shape_help + "; the input is random, in a batch of one")
    scan.add_argument("--output", metavar="PATH", help=output_help("the AnalysisReport"))
    scan.add_argument("--mode", default="full", choices=("full", "structure"),
                      help="full: FLOPs, MACs, DMAs and receptive fields (default); structure: shapes and "
                           "parameters only, no counting")
    scan.add_argument("--max-depth", type=int, metavar="N",
                      help="deepest layer depth shown (0: the root only); rows at N include the layers below them")
    scan.add_argument("--memory", action="store_true", help="also attribute allocator memory to the layer calls")
    scan.add_argument("--trace", metavar="PATH", help="also write the forward as a Chrome / Perfetto trace (JSON)")
    render = sub.add_parser("render", help="print a saved report, diff, scan, benchmark, job or roofline report")
    render.add_argument("report", metavar="REPORT", help="the saved JSON file")
    render.add_argument("--max-depth", type=int, metavar="N",
                        help="for an AnalysisReport: deepest layer depth shown; rows at N include the layers below")
    diff = sub.add_parser("diff", help="compare two saved reports of the same kind and print the changes")
    diff.add_argument("before", metavar="BEFORE", help="the earlier AnalysisReport or FlopReport (JSON)")
    diff.add_argument("after", metavar="AFTER", help="the later report, of the same kind")
    diff.add_argument("--json", action="store_true", help="print the ReportDiff JSON instead of the table")
    diff.add_argument("--output", metavar="PATH", help=output_help("the ReportDiff"))
    bench = sub.add_parser("bench", help="time and measure a model built by MODULE:FACTORY")
    bench.add_argument("factory", metavar="MODULE:FACTORY", help=factory_help)
    bench.add_argument("--input-shape", required=True, type=_shape, metavar="SHAPE",
                       help=shape_help + "; the input is random, in a batch of --batch-size")
    bench.add_argument("--batch-size", type=int, default=1, metavar="N",
                       help="batch dimension of the input (default 1); throughput is per sample")
    bench.add_argument("--output", metavar="PATH", help=output_help("the BenchmarkReport"))
    bench.add_argument("--min-run-time", type=float, default=1.0, metavar="SECONDS",
                       help="time the model for at least this long (default 1.0)")
    bench.add_argument("--warmup", type=int, default=1, metavar="N",
                       help="untimed calls before timing (default 1)")
    bench.add_argument("--threads", type=int, metavar="N",
                       help="torch intra-op threads while timing (default: torch's current setting)")
    compare = sub.add_parser("compare", help="compare two saved benchmark reports")
    compare.add_argument("before", metavar="BEFORE", help="the earlier BenchmarkReport (JSON, from bench --output)")
    compare.add_argument("after", metavar="AFTER", help="the later BenchmarkReport")
    compare.add_argument("--outputs-checked", action="store_true",
                         help="state that the two workloads' outputs were checked and agree (deltas are given)")
    compare.add_argument("--output", metavar="PATH", help=output_help("the BenchmarkComparison"))
    merge = sub.add_parser("merge", help="merge one report per rank of a distributed job into a job report")
    merge.add_argument("reports", nargs="+", metavar="REPORT",
                       help="one saved report per rank, all of the same kind, in rank order")
    merge.add_argument("--output", metavar="PATH", help=output_help("the job report"))
    roof = sub.add_parser("roofline", help="roofline of one forward of a model built by MODULE:FACTORY")
    roof.add_argument("factory", metavar="MODULE:FACTORY", help=factory_help)
    roof.add_argument("--input-shape", required=True, type=_shape, metavar="SHAPE",
                      help=shape_help + "; the input is random, in a batch of one")
    roof.add_argument("--gpu", default="h100-sxm", metavar="NAME",
                      help=f"the GPU whose peaks bound the model (default h100-sxm); one of: "
                           f"{', '.join(torchscan.list_gpus())}")
    roof.add_argument("--precision", default="fp32", metavar="PRECISION",
                      help="the arithmetic precision whose peak applies (default fp32): fp32, tf32, bf16, fp16, "
                           "fp8 or int8")
    roof.add_argument("--actual-ms", type=float, metavar="MS",
                      help="a measured time of the forward in milliseconds, to place the model against its bounds")
    roof.add_argument("--device", default="cpu", help="where the model and input are built (meta: no memory)")
    roof.add_argument("--plot", metavar="PATH", help="write the roofline chart as SVG")
    roof.add_argument("--output", metavar="PATH", help=output_help("the RooflineReport"))
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)

    if args.command == "scan":
        if args.output and args.trace and os.path.realpath(args.output) == os.path.realpath(args.trace):
            _fail("scan", f"--output and --trace name the same file ({args.output}); give the trace its own file")
        for path in (args.output, args.trace):
            if path:
                _check_output("scan", path)  # before the model is built or run
        model = _model("scan", args.factory)
        try:
            report = torchscan.crawl_module(model, args.input_shape, mode=args.mode, memory=args.memory,
                                            trace=bool(args.trace))
        except Exception as e:
            _raised("scan", "the model", e)
        trace = report.pop("trace", None)  # its own file: reports stay small
        print(torchscan.render_report(report, args.max_depth))
        if args.output:
            _write_output("scan", args.output, json.dumps(report, indent=1, sort_keys=True))
        if trace is not None:
            _write_output("scan", args.trace, json.dumps(trace))
    elif args.command == "merge":
        _merge(args)
    elif args.command == "roofline":
        _roofline(args)
    elif args.command == "bench":
        _bench(args)
    elif args.command == "compare":
        _compare(args)
    elif args.command == "render":
        _render(args)
    else:
        _diff(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
