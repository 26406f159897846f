"""Report readers on malformed input, and the command line's file errors.

Every failure is a ValueError (Python) or exit status 1 with one line on
stderr (command line) naming the file, the side of a diff and the JSON path
of the bad field; never a segfault, an nlohmann type error, a traceback or
invalid JSON. The C++ side is fuzzed in tests/cpp/reports/reports_fuzz_test.cc.
"""

import copy
import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

METRICS_HELP = ("missing (a layer has module_flops, macs, dmas, receptive_field, effective_stride and "
                "effective_padding, unless metric_owners names the ancestor that covers it)")


def run(cwd, *args):
    return subprocess.run([sys.executable, "-m", "torchscan", *args], capture_output=True, text=True, timeout=120,
                          cwd=str(cwd))


def one_line_error(result) -> str:
    """The single stderr line of a failed command (exit status 1, no traceback)."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def save(path, report):
    path.write_text(json.dumps(report))
    return path


@pytest.fixture(scope="module")
def analysis(torchscan):
    torch.manual_seed(0)
    return torchscan.crawl_module(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (4,))


@pytest.fixture(scope="module")
def flops(torchscan, checks):
    """FlopReports of (2 x 4) @ (4 x 4) and (64 x 64) @ (64 x 32).

    By hand (2 FLOPs per multiply-add): 2*2*4*4 = 64 and 2*64*64*32 = 262,144;
    FlopCounterMode agrees (checked below)."""
    small_a, small_b = torch.ones(2, 4), torch.ones(4, 4)
    large_a, large_b = torch.ones(64, 64), torch.ones(64, 32)
    small = torchscan.measure_flops(lambda: small_a @ small_b)
    large = torchscan.measure_flops(lambda: large_a @ large_b)
    assert checks.run_flop_counter(lambda: small_a @ small_b)[1] == 64
    assert checks.run_flop_counter(lambda: large_a @ large_b)[1] == 262144
    return small, large


# ------------------------------------------------------------- known crashes


def test_render_of_empty_layer_metrics_is_an_error_not_a_segfault(torchscan, analysis, tmp_path):
    broken = copy.deepcopy(analysis)
    broken["layers"][1]["metrics"] = {}
    with pytest.raises(ValueError) as e:
        torchscan.render_report(broken)
    assert str(e.value) == f"torchscan.render_report: layers[1].metrics.module_flops: {METRICS_HELP}"
    # The command line crashed with status 139 here.
    path = save(tmp_path / "empty_metrics.json", broken)
    line = one_line_error(run(tmp_path, "render", str(path)))
    assert line == f"torchscan render: {path}: layers[1].metrics.module_flops: {METRICS_HELP}"


def test_missing_keys_name_the_field_instead_of_an_nlohmann_type_error(torchscan, analysis, flops):
    cases = []
    r = copy.deepcopy(analysis)
    del r["totals"]["parameters"]
    cases.append((r, "totals.parameters: missing"))
    r = copy.deepcopy(analysis)
    r["layers"][2]["metrics"]["macs"]["value"] = None  # still "complete"
    cases.append((r, "layers[2].metrics.macs.value: expected a non-negative integer, got null"))
    r = copy.deepcopy(analysis)
    del r["layers"][0]["depth"]
    cases.append((r, "layers[0].depth: missing"))
    f = copy.deepcopy(flops[0])
    f["total"]["known_value"] = "64"
    cases.append((f, 'total.known_value: expected a non-negative integer, got the string "64"'))
    for report, problem in cases:
        with pytest.raises(ValueError) as e:
            torchscan.render_report(report)
        assert str(e.value) == f"torchscan.render_report: {problem}"
        assert "type must be" not in str(e.value)


def test_diff_with_missing_path_known_value_or_call_index_is_refused_not_invalid_json(torchscan, analysis,
                                                                                      tmp_path):
    # These wrote `"known_value":,` (invalid JSON) before.
    no_path, no_known, no_index = (copy.deepcopy(analysis) for _ in range(3))
    del no_path["layers"][1]["path"]
    del no_known["layers"][2]["metrics"]["dmas"]["known_value"]
    del no_index["layers"][0]["call_index"]
    with pytest.raises(ValueError, match=r"^torchscan.compare_reports: before report: layers\[1\].path: missing$"):
        torchscan.compare_reports(no_path, analysis)
    with pytest.raises(ValueError, match=r"after report: layers\[2\].metrics.dmas.known_value: missing$"):
        torchscan.compare_reports(analysis, no_known)
    good = save(tmp_path / "good.json", analysis)
    bad = save(tmp_path / "no_index.json", no_index)
    line = one_line_error(run(tmp_path, "diff", str(good), str(bad)))
    assert line == f"torchscan diff: after report ({bad}): layers[0].call_index: missing"
    line = one_line_error(run(tmp_path, "diff", str(bad), str(good)))
    assert line == f"torchscan diff: before report ({bad}): layers[0].call_index: missing"


def test_diff_refuses_a_flop_report_against_an_analysis_report(torchscan, analysis, flops, tmp_path):
    with pytest.raises(ValueError, match="the before report is a FlopReport and the after report is an "
                                         "AnalysisReport; compare two reports of the same kind"):
        torchscan.compare_reports(flops[0], analysis)
    f = save(tmp_path / "flops.json", flops[0])
    a = save(tmp_path / "analysis.json", analysis)
    line = one_line_error(run(tmp_path, "diff", str(a), str(f)))
    assert line.startswith(f"torchscan diff: the before report ({a}) is an AnalysisReport and the after report "
                           f"({f}) is a FlopReport;")


def test_diff_of_two_flop_reports(torchscan, flops, tmp_path):
    small, large = flops
    diff = torchscan.compare_reports(small, large)
    # 262,144 - 64 = 262,080 (it was an empty diff).
    assert diff["totals"]["operator_flops"]["delta"] == 262080
    assert diff["totals"]["operator_flops"]["status"] == "complete"
    assert diff["by_operator"]["aten.mm"]["delta"] == 262080
    assert diff["by_operator"]["aten.mm"]["before"] == {"status": "complete", "value": 64, "known_value": 64}
    assert set(diff) == {"schema_version", "totals", "by_operator"}
    # A partial side: no numeric delta, the status propagates.
    partial = copy.deepcopy(large)
    partial["total"].update(status="partial", value=None)
    d = torchscan.compare_reports(small, partial)
    assert d["totals"]["operator_flops"]["delta"] is None and d["totals"]["operator_flops"]["status"] == "partial"
    assert d["by_operator"]["aten.mm"]["delta"] is None
    # Same through the command line.
    out = run(tmp_path, "diff", str(save(tmp_path / "s.json", small)), str(save(tmp_path / "l.json", large)),
              "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["by_operator"]["aten.mm"]["delta"] == 262080


def test_counts_past_2_to_64_are_read(torchscan, flops):
    huge = copy.deepcopy(flops[0])
    big = 2 ** 70  # 1,180,591,620,717,411,303,424 = 1.18 x 10^21 ("Z")
    huge["by_operator"]["aten.mm"] = big
    huge["total"].update(value=big, known_value=big)
    assert torchscan.render_report(huge).startswith("Operator FLOPs: 1.18Z (complete)\n")
    # Exact past 2^64: 2^70 - 64 (the small report's 64 FLOPs), an int, not a rounded float.
    delta = torchscan.compare_reports(flops[0], huge)["totals"]["operator_flops"]["delta"]
    assert delta == 1180591620717411303360 and isinstance(delta, int)
    back = torchscan.compare_reports(huge, flops[0])["by_operator"]["aten.mm"]["delta"]
    assert back == -1180591620717411303360


def test_counts_to_2_to_128_are_exact_and_larger_ones_refused(torchscan, flops, tmp_path):
    # Two complete reports of 2^64 and 2^64 + 2 FLOPs, all aten.mm: through
    # doubles both are 2^64 (delta 0.0, aten.mm unchanged); exactly, delta 2.
    before, after = copy.deepcopy(flops[0]), copy.deepcopy(flops[0])
    for report, n in ((before, 2 ** 64), (after, 2 ** 64 + 2)):
        report["by_operator"] = {"aten.mm": n}
        report["total"].update(value=n, known_value=n)
    d = torchscan.compare_reports(before, after)
    assert d["totals"]["operator_flops"]["delta"] == 2
    assert d["by_operator"]["aten.mm"]["delta"] == 2
    assert d["by_operator"]["aten.mm"]["after"]["value"] == 2 ** 64 + 2
    # 2^128 - 1 is the largest count a report holds; 2^128 and 2^200 are refused.
    top = copy.deepcopy(before)
    top["by_operator"]["aten.mm"] = 2 ** 128 - 1
    top["total"].update(value=2 ** 128 - 1, known_value=2 ** 128 - 1)
    assert torchscan.compare_reports(before, top)["totals"]["operator_flops"]["delta"] == 2 ** 128 - 1 - 2 ** 64
    for n in (2 ** 128, 2 ** 200):
        big = copy.deepcopy(before)
        big["total"].update(value=n, known_value=n)
        with pytest.raises(ValueError, match=r"total.value: a count past 2\^128 - 1"):
            torchscan.render_report(big)
        with pytest.raises(ValueError, match=r"after report: total.value: a count past 2\^128 - 1"):
            torchscan.compare_reports(before, big)
        # The command line says the same.
        message = cli_message("diff", str(save(tmp_path / "b.json", before)), str(save(tmp_path / "big.json", big)))
        assert "total.value: a count past 2^128 - 1" in message, message


def test_repeated_keys_are_refused_by_every_reader(torchscan, flops, tmp_path):
    text = json.dumps(flops[0])
    repeated = text.replace('"total": {', '"total": {"status": "partial", ', 1)
    assert repeated != text
    path = str(tmp_path / "r.json")
    (tmp_path / "r.json").write_text(repeated)
    for args in (("render", path), ("diff", path, path)):
        message = cli_message(*args)
        assert 'total: the key "status" appears twice in one object' in message, message


def cli_message(*args) -> str:
    """The one-line exit message of the command line, run in this process
    (cli/test_cli_errors.py has the subprocess checks)."""
    import contextlib
    import io

    from torchscan.__main__ import main

    with pytest.raises(SystemExit) as info, contextlib.redirect_stdout(io.StringIO()):
        main(list(args))
    assert isinstance(info.value.code, str) and "\n" not in info.value.code, info.value.code
    return info.value.code


def test_reports_that_are_not_json_are_refused_by_name(torchscan, flops):
    nan = copy.deepcopy(flops[0])
    nan["by_operator"]["aten.mm"] = float("nan")
    with pytest.raises(ValueError, match=r"^torchscan.render_report: the report is not valid JSON \(Out of range"):
        torchscan.render_report(nan)
    with pytest.raises(TypeError, match="the after report is not JSON-serializable"):
        torchscan.compare_reports(flops[0], {**flops[0], "context": torch.ones(1)})


# ------------------------------------------------------- command-line file errors


def cli_error_in(cwd, *args) -> str:
    """cli_message run from `cwd` (relative paths as a user in that folder
    types them). Each test below also runs one case as a real process."""
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        return cli_message(*args)
    finally:
        os.chdir(previous)


def test_render_file_errors_name_the_file(tmp_path):
    (tmp_path / "folder.json").mkdir()
    (tmp_path / "broken.json").write_text('{"schema_version": 1,\n "layers": [')
    (tmp_path / "latin1.json").write_bytes(b'{"name": "caf\xe9"}')
    (tmp_path / "empty.json").write_text("  \n")
    (tmp_path / "list.json").write_text("[1, 2]")
    expected = {
        "missing.json": "torchscan render: the report missing.json does not exist",
        "folder.json": "torchscan render: the report folder.json is a directory, not a report file",
        "broken.json": "torchscan render: broken.json: not valid JSON (parse error at line 2, column 13: syntax error "
                       "while parsing value - unexpected end of input; expected '[', '{', or a literal)",
        "latin1.json": "torchscan render: the report latin1.json is not JSON (not UTF-8 text: byte 13 is 0xe9)",
        "empty.json": "torchscan render: the report empty.json is empty, not a JSON report",
        "list.json": "torchscan render: list.json: (top level): expected a report (a JSON object), got an array of 2",
    }
    # One as a process (exit status 1, one stderr line, no traceback), the rest in this process.
    assert one_line_error(run(tmp_path, "render", "broken.json")) == expected["broken.json"]
    for name, message in expected.items():
        assert cli_error_in(tmp_path, "render", name) == message


def test_diff_file_errors_name_the_file_and_side(torchscan, analysis, tmp_path):
    save(tmp_path / "a.json", analysis)
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "diff.json").write_text(json.dumps(torchscan.compare_reports(analysis, analysis)))
    assert one_line_error(run(tmp_path, "diff", "a.json", "gone.json")) == (
        "torchscan diff: the after report gone.json does not exist")
    # The rest in this process (the same messages, without starting another interpreter).
    assert cli_error_in(tmp_path, "diff", "gone.json", "a.json") == (
        "torchscan diff: the before report gone.json does not exist")
    assert cli_error_in(tmp_path, "diff", "broken.json", "a.json").startswith(
        "torchscan diff: before report (broken.json): not valid JSON (parse error at line 1, column 2")
    assert cli_error_in(tmp_path, "diff", "a.json", "diff.json") == (
        "torchscan diff: after report (diff.json): (top level): this is a ReportDiff (the output of "
        "compare_reports), not a report")
    # --output is checked before anything is read.
    assert cli_error_in(tmp_path, "diff", "gone.json", "a.json", "--output", "no/such/dir/d.json") == (
        f"torchscan diff: --output no/such/dir/d.json: the directory {tmp_path}/no/such/dir does not exist; "
        "create it first")


FACTORY = """
import pathlib

import torch


def build():
    pathlib.Path("factory_ran").write_text("yes")
    return torch.nn.Linear(3, 2)
"""


def test_scan_checks_output_before_running_the_model(tmp_path):
    (tmp_path / "marker_factory.py").write_text(FACTORY)
    (tmp_path / "a_file").write_text("")
    (tmp_path / "a_dir").mkdir()
    expected = {
        "missing/report.json": f"torchscan scan: --output missing/report.json: the directory {tmp_path}/missing does "
                               "not exist; create it first",
        "a_dir": "torchscan scan: --output a_dir is a directory; give a file name, e.g. a_dir/report.json",
        "a_file/report.json": f"torchscan scan: --output a_file/report.json: {tmp_path}/a_file is not a directory",
    }
    for i, (output, message) in enumerate(expected.items()):
        args = ("scan", "marker_factory:build", "--input-shape", "3", "--output", output)
        # The first as a process, the others in this process.
        assert (one_line_error(run(tmp_path, *args)) if i == 0 else cli_error_in(tmp_path, *args)) == message
        assert not (tmp_path / "factory_ran").exists(), "the model was built before --output was checked"
    ok = run(tmp_path, "scan", "marker_factory:build", "--input-shape", "3", "--output", "report.json")
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "factory_ran").exists() and json.loads((tmp_path / "report.json").read_text())["layers"]


def test_scan_refuses_an_unwritable_output_directory(tmp_path, monkeypatch):
    # Tests run as root here, where permissions never refuse a write: the
    # check's verdict is simulated, the message and the early exit are real.
    from torchscan import __main__ as cli

    built = []
    monkeypatch.setattr(cli, "_factory", lambda spec: built.append(spec))
    monkeypatch.setattr(cli.os, "access", lambda path, mode: False)
    with pytest.raises(SystemExit) as e:
        cli.main(["scan", "x:y", "--input-shape", "3", "--output", str(tmp_path / "r.json")])
    assert str(e.value) == f"torchscan scan: --output {tmp_path / 'r.json'}: the directory {tmp_path} is not writable"
    assert built == []
