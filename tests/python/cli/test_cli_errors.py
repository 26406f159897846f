"""Bad input to the command line and to the Python readers: one line on
stderr and exit status 1 (or a ValueError/TypeError naming the field), never
a traceback or a hang; and the entry points that measured nothing or the
wrong thing refuse instead of answering complete 0."""

import contextlib
import io
import json
import os
import subprocess
import sys
import threading

import pytest
import torch
from torch import nn

from conftest import REPO_ROOT


def run(cwd, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "torchscan", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=str(cwd))


def one_line_error(result) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def cli_error(*args, timeout=30) -> str:
    """The one-line message of the command line run in this process (in the
    current directory), which must end within `timeout` seconds with exit
    status 1. A subprocess per case would cost seconds of torch import each;
    test_scan_of_a_factory_that_returns_no_module runs the real process."""
    from torchscan.__main__ import main

    result = {}

    def target():
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                result["code"] = main(list(args))
        except SystemExit as e:
            result["code"] = e.code
        except BaseException as e:  # noqa: BLE001 - reported below
            result["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{args}: still running after {timeout} s"
    assert "error" not in result, f"{args}: {type(result['error']).__name__}: {result['error']}"
    code = result["code"]
    assert isinstance(code, str) and "\n" not in code, (args, code)
    return code


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def bench_report(torchscan):
    a, b = torch.ones(4, 8), torch.ones(8, 2)
    return torchscan.measure_workload(lambda: a @ b, latency=True, min_run_time=0.01)


def test_a_fifo_or_directory_is_refused_without_waiting_for_a_writer(in_tmp):
    tmp_path = in_tmp
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    (tmp_path / "dir.json").mkdir()
    (tmp_path / "ok.json").write_text("{}")
    cases = [("render", "pipe.json"), ("diff", "pipe.json", "ok.json"), ("diff", "ok.json", "pipe.json"),
             ("compare", "pipe.json", "ok.json"), ("merge", "ok.json", "pipe.json"), ("render", "dir.json")]
    for args in cases:
        # A reader that opened the FIFO would block forever: a timeout fails the test.
        message = cli_error(*args)
        if "pipe.json" in args:
            assert "pipe.json is a FIFO (named pipe), not a report file" in message, message
        else:
            assert "dir.json is a directory, not a report file" in message, message


def test_a_fifo_output_is_refused_before_anything_runs(in_tmp):
    tmp_path = in_tmp
    os.mkfifo(tmp_path / "out.json")
    (tmp_path / "ok.json").write_text("{}")
    message = cli_error("diff", "ok.json", "ok.json", "--output", "out.json")
    assert message == "torchscan diff: --output out.json exists and is not a regular file; give a file name"
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1}]}))
    done = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "trace_figure.py"), str(trace), "-o",
                           str(tmp_path / "out.json")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "is not a regular file" in done.stderr, done.stderr


def test_deep_json_is_refused_by_every_reader(in_tmp, bench_report):
    tmp_path = in_tmp
    deep = "[" * 100000 + "]" * 100000
    (tmp_path / "deep.json").write_text(deep)
    (tmp_path / "b.json").write_text(json.dumps(bench_report))
    for args in (("render", "deep.json"), ("diff", "deep.json", "deep.json"), ("compare", "deep.json", "b.json"),
                 ("compare", "b.json", "deep.json"), ("merge", "deep.json")):
        message = cli_error(*args)
        assert "nest" in message and "200 levels deep" in message, message


def test_malformed_benchmark_fields_are_named(torchscan, bench_report, in_tmp):
    tmp_path = in_tmp
    comparison = torchscan.compare_benchmarks(bench_report, bench_report, check=True)
    broken = []
    r = json.loads(json.dumps(bench_report))
    r["context"]["threads"] = 3  # was: AttributeError 'int' object has no attribute 'get'
    broken.append(("render", r, "context.threads must be an object"))
    c = json.loads(json.dumps(comparison))
    del c["totals"]["latency"]["before"]["unit"]  # was: KeyError: 'unit'
    broken.append(("render", c, "totals.latency.before.unit must be a string"))
    c = json.loads(json.dumps(comparison))
    c["totals"]["operator_flops"] = 7
    broken.append(("render", c, "totals.operator_flops must be a metric difference object"))
    c = json.loads(json.dumps(comparison))
    c["latency_change"]["before_iqr_seconds"] = None
    broken.append(("render", c, "latency_change.before_iqr_seconds must be [q1, q3]"))
    r = json.loads(json.dumps(bench_report))
    r["totals"]["operator_flops"].update(value=2**200, known_value=2**200)
    broken.append(("compare", r, "totals.operator_flops.value is " + str(2**200) + ", past 2^128 - 1"))
    for i, (command, report, message) in enumerate(broken):
        path = tmp_path / f"r{i}.json"
        path.write_text(json.dumps(report))
        args = (command, path.name) if command == "render" else (command, path.name, path.name)
        assert message in cli_error(*args), (i, message)
        with pytest.raises((ValueError, TypeError), match=message.replace("[", r"\[").replace("^", r"\^")):
            if command == "render":
                torchscan.render_benchmark(report)
            else:
                torchscan.compare_benchmarks(report, report)


def test_a_roofline_report_is_named_where_it_is_not_read(torchscan, in_tmp, capsys):
    from torchscan.__main__ import main

    tmp_path = in_tmp
    roof = torchscan.roofline(nn.Linear(4, 4), torch.ones(2, 4))
    (tmp_path / "roof.json").write_text(json.dumps(roof))
    # render prints it (as torchscan.render_roofline does)...
    assert main(["render", "roof.json"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == torchscan.render_roofline(roof).rstrip("\n")
    # ... the readers of other kinds name it.
    assert "is a RooflineReport" in cli_error("compare", "roof.json", "roof.json")
    assert "roof.json is a RooflineReport" in cli_error("merge", "roof.json")
    assert "a RooflineReport (torchscan.roofline) is not an AnalysisReport" in cli_error("diff", "roof.json",
                                                                                          "roof.json")
    # What does read it accepts it.
    assert "Bottleneck" in torchscan.render_roofline(json.loads((tmp_path / "roof.json").read_text()))


def test_scan_of_a_factory_that_returns_no_module(in_tmp, monkeypatch):
    (in_tmp / "factories.py").write_text("def numbers():\n    return [1, 2]\n")
    expected = ("torchscan {}: factories:numbers returned list, not a torch.nn.Module; FACTORY must build the "
                "model (e.g. torchscan.examples:small_cnn)")
    # The real process once: exit status 1, one line on stderr, no traceback.
    assert one_line_error(run(in_tmp, "scan", "factories:numbers", "--input-shape", "4")) == expected.format("scan")
    monkeypatch.syspath_prepend(str(in_tmp))
    for command in ("scan", "bench", "roofline"):
        assert cli_error(command, "factories:numbers", "--input-shape", "4") == expected.format(command)


def test_a_model_or_factory_that_raises_is_one_line(in_tmp, monkeypatch):
    (in_tmp / "models.py").write_text(
        "import torch\n"
        "def broken():\n    raise OSError('no weights here')\n"
        "def linear():\n    return torch.nn.Linear(4, 4)\n")
    monkeypatch.syspath_prepend(str(in_tmp))
    for command in ("scan", "bench", "roofline"):
        assert cli_error(command, "models:broken", "--input-shape", "4") == \
            f"torchscan {command}: models:broken() raised OSError: no weights here"
        # A batch of (1, 3) into Linear(4, 4): the forward's own error, as one line.
        message = cli_error(command, "models:linear", "--input-shape", "3")
        assert message.startswith(f"torchscan {command}: the model raised RuntimeError: mat1 and mat2 shapes cannot "
                                  "be multiplied"), message
        assert cli_error(command, "models:linear", "--input-shape", "4,-2") == (
            "torchscan: --input-shape takes comma-separated non-negative integers, got '4,-2'")


def test_repeated_keys_are_refused_by_the_python_readers(in_tmp, bench_report):
    tmp_path = in_tmp
    text = json.dumps(bench_report)
    repeated = text.replace('"totals": {', '"totals": {"latency": 1, ', 1)
    assert repeated != text
    (tmp_path / "r.json").write_text(repeated)
    for args in (("render", "r.json"), ("compare", "r.json", "r.json"), ("merge", "r.json")):
        assert 'the key "latency" appears twice in one object' in cli_error(*args)


def test_roofline_readers_validate(torchscan):
    roof = torchscan.roofline(nn.Linear(4, 4), torch.ones(2, 4))
    bad = json.loads(json.dumps(roof))
    del bad["totals"]["sol_ms"]
    for reader in (torchscan.render_roofline, torchscan.roofline.__globals__["roofline_svg"]):
        with pytest.raises(ValueError, match=r"totals.sol_ms is missing; this is not a RooflineReport"):
            reader(bad)
    with pytest.raises(TypeError, match="a RooflineReport is a dict"):
        torchscan.render_roofline([roof])
    with pytest.raises(ValueError, match="points must be 'layers' or 'operators'"):
        roof.to_svg(points="kernels")
    # Extreme but valid values: the chart is still drawn (its axes are decades).
    wide = json.loads(json.dumps(roof))
    wide["context"]["memory_bandwidth_gbps"] = 1e250
    wide["context"]["peak_matmul_tflops"] = 1e-250
    assert torchscan.roofline.__globals__["roofline_svg"](wide).startswith("<svg")
    wide["context"]["memory_bandwidth_gbps"] = 1e300  # 1e309 bytes/s: not a number the chart can use
    with pytest.raises(ValueError, match="context.memory_bandwidth_gbps must be a positive number of GB/s"):
        torchscan.render_roofline(wide)


def test_roofline_of_a_generator_function_is_refused(torchscan):
    a = torch.ones(8, 8)

    def gen():
        yield a @ a

    with pytest.raises(TypeError, match=r"torchscan.roofline\(workload\): workload\(\) returned a generator"):
        torchscan.roofline(gen)


def test_peak_memory_of_a_meta_workload_is_unavailable(torchscan):
    model = nn.Linear(256, 256).to("meta")
    x = torch.ones(64, 256, device="meta")
    for report in (torchscan.measure_peak_memory(lambda: model(x)),
                   torchscan.measure_workload(lambda: model(x), flops=False)):
        peak = report["peak_memory"] if "peak_memory" in report else report["totals"]["peak_memory"]
        assert peak["status"] == "unavailable" and peak["value"] is None
        assert "memory_device_unsupported" in [d["code"] for d in report["diagnostics"]]
    # A meta workload that returns nothing (a backward pass): measure_workload's
    # FLOP scan sees its calls' devices.
    xg = torch.ones(64, 256, device="meta", requires_grad=True)
    report = torchscan.measure_workload(lambda: model(xg).sum().backward())
    assert report["totals"]["peak_memory"]["status"] == "unavailable"
    assert report["totals"]["operator_flops"]["status"] == "complete"
    # A CPU workload that allocates nothing stays a complete 0 (zeroing an existing tensor in place).
    z = torch.zeros(16)
    assert torchscan.measure_peak_memory(lambda: z.zero_())["peak_memory"] == {
        "status": "complete", "value": 0, "known_value": 0, "unit": "bytes", "scope": "workload",
        "method": "torch.profiler.profile(profile_memory=True):memory_events"}
    # On the CPU the same workload has a measured peak: 64 x 256 float32 outputs = 65,536 bytes at least.
    cpu = nn.Linear(256, 256)
    y = torch.ones(64, 256)
    peak = torchscan.measure_peak_memory(lambda: cpu(y))["peak_memory"]
    assert peak["status"] == "complete" and peak["value"] >= 64 * 256 * 4


def test_a_raising_caller_formula_propagates_with_its_name(torchscan):
    a, b = torch.ones(2, 3), torch.ones(3, 4)

    def broken_mm(*args, **kwargs):
        raise ZeroDivisionError("my formula divided by zero")

    with pytest.raises(ZeroDivisionError, match="my formula divided by zero") as info:
        torchscan.measure_flops(lambda: a @ b, custom_mapping={torch.ops.aten.mm: broken_mm})
    notes = getattr(info.value, "__notes__", [])
    assert any("broken_mm" in n and "aten.mm" in n for n in notes), notes
    # Nothing is left behind: the next scan on this thread counts exactly (2 * 2 * 3 * 4 = 48).
    assert torchscan.measure_flops(lambda: a @ b)["total"]["value"] == 48


def test_attach_refuses_an_output_folder_it_cannot_write(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    try:
        import attach
    finally:
        sys.path.pop(0)
    for output, message in ((tmp_path / "missing" / "r.json", "its directory"), (tmp_path, "is a directory")):
        with pytest.raises(SystemExit) as info:
            attach.main(["--output", str(output), "--", "/bin/true"])
        assert info.value.code == 2
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    # Running as root, permissions cannot deny a write: os.access answers as for another user.
    monkeypatch.setattr(attach.os, "access",
                        lambda p, mode: False if str(p) == str(locked) else real_access(p, mode))
    started = threading.Event()
    monkeypatch.setattr(attach.os, "execve", lambda *a: started.set())
    with pytest.raises(SystemExit):
        attach.main(["--output", str(locked / "r.json"), "--", "/bin/true"])
    assert not started.is_set()
