"""The command line's tables: `diff` prints a table (--json: the ReportDiff),
`render` reads a saved diff and a C++ scan report, every option has help
text, and `bench` prints none of the profiler's own log lines."""

import contextlib
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import torchscan
from torchscan.__main__ import main

pytestmark = pytest.mark.usefixtures("torchscan")


def _cli(capsys, *args) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def _reports(tmp_path):
    # before: Linear(4, 8) on one row: 8*(2*4 - 1) + 8 = 64 module FLOPs,
    # 32 MACs, 4 + 32 + 8 + 8 = 52 DMAs; operator view (addmm, 2K per dot):
    # 2*32 = 64. after: Linear(4, 6): 6*7 + 6 = 48 FLOPs, 24 MACs,
    # 4 + 24 + 6 + 6 = 40 DMAs, 2*24 = 48 operator FLOPs.
    before = torchscan.crawl_module(nn.Linear(4, 8), (4,))
    after = torchscan.crawl_module(nn.Linear(4, 6), (4,))
    paths = []
    for name, report in (("before.json", before), ("after.json", after),
                         ("fbefore.json", before["operator_flops"]), ("fafter.json", after["operator_flops"])):
        (tmp_path / name).write_text(json.dumps(report))
        paths.append(str(tmp_path / name))
    return before, after, paths


def _line(text: str, first: str) -> list:
    return next(line.split() for line in text.splitlines() if line.split()[:1] == [first])


def test_diff_prints_a_table_and_json_on_request(tmp_path, capsys):
    before, after, (b, a, fb, fa) = _reports(tmp_path)
    table = _cli(capsys, "diff", b, a)
    # Totals: 64 -> 48 is -16, -25.0%; MACs 32 -> 24 is -8, -25.0%; DMAs 52 -> 40 is -12, -23.1%.
    assert _line(table, "module_flops") == ["module_flops", "64", "48", "-16", "(-25.0%)"]
    assert _line(table, "macs") == ["macs", "32", "24", "-8", "(-25.0%)"]
    assert _line(table, "dmas") == ["dmas", "52", "40", "-12", "(-23.1%)"]
    assert _line(table, "operator_flops") == ["operator_flops", "64", "48", "-16", "(-25.0%)"]
    # One layer call (the root), changed in each of the three module metrics.
    assert "1 changed, 0 added, 0 removed" in table
    assert _line(table, "(root)") == ["(root)", "module_flops", "64", "48", "-16", "(-25.0%)"]
    assert len(table.splitlines()) < 30 and not table.lstrip().startswith("{")
    # --json: the ReportDiff compare_reports returns, and --output saves it.
    out = tmp_path / "diff.json"
    assert json.loads(_cli(capsys, "diff", b, a, "--json", "--output", str(out))) == \
        torchscan.compare_reports(before, after)
    # render reads the saved diff: the same table.
    assert _cli(capsys, "render", str(out)) == table
    # Two FlopReports: the operators that differ (addmm 64 -> 48).
    flops = _cli(capsys, "diff", fb, fa)
    assert _line(flops, "aten.addmm") == ["aten.addmm", "64", "48", "-16", "(-25.0%)"]


def test_diff_table_keeps_incomplete_sides_honest(tmp_path, capsys):
    before, after, (b, _, _, _) = _reports(tmp_path)
    after["totals"]["macs"].update(status="partial", value=None, known_value=20)
    (tmp_path / "partial.json").write_text(json.dumps(after))
    table = _cli(capsys, "diff", b, str(tmp_path / "partial.json"))
    # No delta when a side is partial: its known part is a lower bound.
    assert _line(table, "macs") == ["macs", "32", ">=", "20", "n/a", "(partial)"]


def _scan_report():
    """A C++ scan report of two requests of one shape, aggregated: the
    shape ScanReportJson writes (torchscan_dispatch/analyses/aggregate.h)."""
    def metric(v, unit="FLOPs", method="module_formulas"):
        return {"status": "complete", "value": v, "known_value": v, "unit": unit, "scope": "workload",
                "method": method}

    def metrics(op, flops, macs, dmas):
        return {"operator_flops": metric(op, method="operator_dispatch"), "module_flops": metric(flops),
                "macs": metric(macs, "MACs"), "dmas": metric(dmas, "accesses")}

    flop_report = torchscan.measure_flops(lambda: torch.ones(2, 4) @ torch.ones(4, 8))  # 2*2*4*8 = 128
    dist = {"requests": 2, "min": 128, "median": 128, "p99": 128, "max": 128, "exact": True, "unit": "FLOPs"}
    return {
        "kind": "torchscan_scan_report", "schema_version": 1,
        "context": {"threads": "all", "torch_version": torch.__version__, "torchscan_version": "x",
                    "snapshot": False, "in_flight_calls": 0},
        "operator_flops": flop_report,
        "module_report": {"totals": {"module_flops": metric(1234), "macs": metric(600, "MACs"),
                                     "dmas": metric(2000, "accesses")}},
        "aggregate": {
            "grouped_by": ["path", "call_index", "signature"], "requests": 2,
            "layers": [{"path": "", "call_index": 0, "depth": 0, "calls": 2, "signature": "ab",
                        "input": {"shape": [2, 4], "dtype": "float32"}, "metrics": metrics(256, 240, 96, 1500)},
                       {"path": "fc", "call_index": 0, "depth": 1, "calls": 2, "signature": "cd",
                        "input": {"shape": [2, 4], "dtype": "float32"}, "metrics": metrics(0, 1234, 600, 2000)}],
            "request_totals": {"operator_flops": dist},
            "request_classes": [{"common": True, "requests": 2, "signature": "ab", "calls": 9,
                                 "input": {"shape": [2, 4], "dtype": "float32"},
                                 "totals": metrics(128, 617, 300, 1000)}],
            "requests_in_omitted_classes": 0,
        },
        "layers": [], "requests": [],
        "threads": [{"thread": 7, "name": "worker", "calls": 18, "totals": metrics(256, 1234, 600, 2000)}],
    }


def test_render_reads_a_cpp_scan_report(tmp_path, capsys):
    path = tmp_path / "scan.json"
    path.write_text(json.dumps(_scan_report()))
    text = _cli(capsys, "render", str(path))
    assert "Module view (TorchScan conventions): 1.23k FLOPs, 600 MACs, 2.00k DMAs" in text
    assert "Requests: 2." in text
    assert _line(text, "fc") == ["fc", "2", "[2,", "4]", "float32", "0", "1.23k", "600", "2.00k"]
    assert "operator_flops: min 128, median 128, p99 128, max 128" in text
    assert _line(text, "common") == ["common", "2", "[2,", "4]", "float32", "9", "128", "617", "300", "1.00k"]
    assert _line(text, "7") == ["7", "worker", "18", "256", "1.23k", "600", "2.00k"]
    # The operator view's own table, as render_report prints the FlopReport.
    assert text.endswith(torchscan.render_report(_scan_report()["operator_flops"]))
    # A scan report from this process (one row per call, no aggregate) reads too.
    with torch.no_grad(), torchscan.scan() as s:
        nn.Linear(4, 8)(torch.ones(1, 4))
    path.write_text(json.dumps(s.scan_report()))
    assert "Operator FLOPs: " in _cli(capsys, "render", str(path))


def test_a_malformed_scan_report_is_one_line(tmp_path):
    report = _scan_report()
    report["aggregate"]["layers"] = 3
    (tmp_path / "bad.json").write_text(json.dumps(report))
    with pytest.raises(SystemExit) as e:
        main(["render", str(tmp_path / "bad.json")])
    assert str(e.value).endswith("aggregate.layers is int, expected an array")


def test_every_option_has_help_text():
    import argparse

    from torchscan import __main__ as cli

    parser = cli._parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if not action.help:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []
    assert len(subparsers.choices) == 7


def test_bench_prints_none_of_the_profilers_log_lines(tmp_path):
    out = subprocess.run([sys.executable, "-m", "torchscan", "bench", "torchscan.examples:small_cnn",
                          "--input-shape", "3,16,16", "--min-run-time", "0.05", "--warmup", "0"],
                         capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "TorchScan benchmark" in out.stdout
    assert "USDT" not in out.stdout and "USDT" not in out.stderr, out.stderr


def test_profiler_noise_keeps_other_output():
    code = ("import os, sys\n"
            "from torchscan._profiler_noise import ProfilerNoise\n"
            "with ProfilerNoise():\n"
            "    os.write(2, b'USDT:2026 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\\n')\n"
            "    print('a warning', file=sys.stderr)\n"
            "os.write(2, b'after\\n')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == "a warning\nafter\n", out.stderr


def test_mutated_diffs_and_scan_reports_render_or_fail_in_one_line(tmp_path, monkeypatch):
    import random

    monkeypatch.chdir(tmp_path)
    before, after, _ = _reports(tmp_path)
    seeds = [torchscan.compare_reports(before, after), _scan_report(),
             torchscan.compare_reports(before["operator_flops"], after["operator_flops"])]
    rng = random.Random(7)
    replacements = [None, 3, -1, 2.5, "x", [], {}, [1, "a"], {"status": "complete"}, True]

    def nodes(value, out):
        out.append(value)
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            nodes(child, out)
        return out

    for case in range(300):
        doc = json.loads(json.dumps(rng.choice(seeds)))
        for _ in range(rng.randrange(1, 4)):
            containers = [n for n in nodes(doc, []) if isinstance(n, (dict, list)) and n]
            target = rng.choice(containers)
            key = rng.choice(list(target)) if isinstance(target, dict) else rng.randrange(len(target))
            if rng.random() < 0.2 and isinstance(target, dict):
                del target[key]
            else:
                target[key] = rng.choice(replacements)
        (tmp_path / "m.json").write_text(json.dumps(doc))
        try:
            with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
                main(["render", "m.json"])
        except SystemExit as e:  # a one-line message, never a traceback
            assert isinstance(e.code, str) and "\n" not in e.code, (case, e.code)
