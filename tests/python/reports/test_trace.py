"""Traces (scan(trace=True), crawl_module(trace=True), scan(threads="all",
trace=True), the attach launcher's --trace): the trace-event JSON format
(complete "X" slices with ts/dur in microseconds, one named track per
thread, requests as flows) and the arguments each slice carries, derived by
hand for a small MLP and the example CNN."""
import ctypes
import json
import subprocess
import sys
import threading
from collections import defaultdict

import pytest
import torch
import torch.nn as nn

import torchscan
from conftest import REPO_ROOT

# The attached-server checks are the serving tests' own (tests/python/serving/).
sys.path.insert(0, str(REPO_ROOT / "tests" / "python" / "serving"))
from test_serving import attach, check_report, served  # noqa: E402, F401  (served is a fixture)


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def _slices(trace, cat=None):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (cat is None or e["cat"] == cat)]


def _thread_names(trace):
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}


def _flows(trace):
    """bind_id -> that flow's slices in start order."""
    flows = defaultdict(list)
    for e in _slices(trace):
        if "bind_id" in e:
            flows[e["bind_id"]].append(e)
    return {k: sorted(v, key=lambda e: e["ts"]) for k, v in flows.items()}


def _check_format(trace):
    json.dumps(trace, allow_nan=False)  # loads in any trace viewer: plain JSON
    slices = _slices(trace)
    assert slices
    tracks = defaultdict(list)
    for e in slices:
        assert {"ph", "ts", "dur", "pid", "tid", "name", "cat", "args"} <= set(e)
        assert e["ts"] >= 0 and e["dur"] >= 0
        tracks[e["pid"], e["tid"]].append(e)
    # Every track is named (a thread_name metadata event).
    assert {tid for _, tid in tracks} <= set(_thread_names(trace))
    # Complete events on one track must nest: any two are disjoint or one
    # contains the other (ends compared with a rounding margin of 1 ns).
    # Slices of different tracks may overlap (threads run at once).
    for track in tracks.values():
        for a in track:
            for b in track:
                a0, a1, b0, b1 = a["ts"], a["ts"] + a["dur"], b["ts"], b["ts"] + b["dur"]
                disjoint = a1 <= b0 + 1e-3 or b1 <= a0 + 1e-3
                nested = (a0 <= b0 and b1 <= a1 + 1e-3) or (b0 <= a0 and a1 <= b1 + 1e-3)
                assert disjoint or nested, (a, b)
    # Flows (v2: bind_id on the slices): out of the first slice, through the
    # middle ones, into the last; at least two slices each.
    for chain in _flows(trace).values():
        assert len(chain) >= 2
        for k, e in enumerate(chain):
            assert e.get("flow_in", False) == (k > 0), e
            assert e.get("flow_out", False) == (k < len(chain) - 1), e


def test_crawl_trace_nests_modules_and_operators():
    report = torchscan.crawl_module(_mlp(), args=(torch.randn(8, 16),), trace=True)
    trace = report["trace"]
    _check_format(trace)
    modules = {e["name"]: e for e in _slices(trace, "module")}
    assert set(modules) == {"(root)", "0", "1", "2"}
    root = modules["(root)"]
    for e in _slices(trace):  # everything happens inside the forward
        assert root["ts"] <= e["ts"] and e["ts"] + e["dur"] <= root["ts"] + root["dur"] + 1e-3
    addmm = [e for e in _slices(trace, "operator") if e["name"] == "aten.addmm"]
    assert len(addmm) == 2
    first, second = sorted(addmm, key=lambda e: e["ts"])
    # Inside the first Linear's slice, FlopCounterMode's convention:
    # 8*16*32*2 = 8192 and 8*32*4*2 = 2048 FLOPs.
    lin0 = modules["0"]
    assert lin0["ts"] <= first["ts"] and first["ts"] + first["dur"] <= lin0["ts"] + lin0["dur"] + 1e-3
    assert first["args"]["flops"] == 8192 and second["args"]["flops"] == 2048
    # Bytes: input 8*16, weight 32*16 and bias 32 floats read (the expanded
    # bias moves its own 32 values), the 8*32 output written.
    assert first["args"]["bytes_read"] == 4 * (8 * 16 + 32 * 16 + 32)
    assert first["args"]["bytes_written"] == 4 * 8 * 32
    assert [8, 16] in first["args"]["inputs"] and [32] in first["args"]["inputs"]
    assert first["args"]["outputs"] == [[8, 32]]
    relu = next(e for e in _slices(trace, "operator") if e["name"] == "aten.relu")
    assert relu["args"]["flops"] == 8 * 32  # one selection per value


def test_scan_trace_and_misuse():
    x = torch.randn(4, 4)
    with torchscan.scan(trace=True) as s:
        torch.mm(x, x)
    trace = s.trace()
    _check_format(trace)
    ops = _slices(trace, "operator")
    mm = [e for e in ops if e["name"] == "aten.mm"]
    # One top-level mm (its kernel's inner calls, e.g. resolve_conj, nest inside it): 4*4*4*2 FLOPs.
    assert len(mm) == 1 and mm[0]["args"]["flops"] == 4 * 4 * 4 * 2
    assert all(mm[0]["ts"] <= e["ts"] for e in ops)
    with torchscan.scan() as plain:
        torch.mm(x, x)
    with pytest.raises(RuntimeError, match=r"trace=True"):
        plain.trace()
    with pytest.raises(TypeError, match="trace must be True or False"):
        torchscan.scan(trace="yes")


def test_a_raising_call_is_marked_and_the_trace_still_nests():
    x = torch.randn(2, 3)
    with pytest.raises(RuntimeError):
        with torchscan.scan(trace=True) as s:
            torch.mm(x, x)  # (2x3)@(2x3): shapes do not match
    trace = s.trace()
    _check_format(trace)
    assert any(e["args"].get("raised") for e in _slices(trace, "operator"))


def test_command_line_writes_the_trace_beside_the_report(tmp_path, capsys):
    from torchscan.__main__ import main

    report_path, trace_path = tmp_path / "report.json", tmp_path / "trace.json"
    assert main(["scan", "torchscan.examples:small_cnn", "--input-shape", "3,32,32", "--memory",
                 "--trace", str(trace_path), "--output", str(report_path)]) == 0
    assert "Peak mem" in capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert "trace" not in report and report["totals"]["peak_memory"]["status"] == "complete"
    trace = json.loads(trace_path.read_text())
    _check_format(trace)
    # One module slice per layer call of the report.
    assert len(_slices(trace, "module")) == len(report["layers"])


def test_a_scope_open_at_stop_ends_with_the_scan():
    import time

    s = torchscan.scan(trace=True)
    with s:
        torch.relu(torch.ones(4))
        s._session.push_module_scope("open")  # never popped
        time.sleep(0.002)
    trace = s.trace()
    _check_format(trace)
    (open_slice,) = [e for e in _slices(trace, "module") if e["name"] == "open"]
    assert open_slice["dur"] >= 2000  # at least the 2 ms slept after it opened (microseconds)


def test_a_handler_calling_modules_adds_no_layer_slice_or_row():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.mha = nn.MultiheadAttention(16, 2, batch_first=True)
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            y, _ = self.mha(x, x, x, need_weights=False)
            return self.fc(y)

    model = Model()

    def handler(module, args, kwargs, output):
        model.fc(output[0])  # TorchScan's caller's own work, not the model's
        return {"module_flops": 1}

    x = torch.randn(1, 10, 16)
    report = torchscan.crawl_module(model, args=(x,), memory=True, trace=True,
                                    custom_modules={nn.MultiheadAttention: handler})
    plain = torchscan.crawl_module(model, args=(x,))
    assert [(l["path"], l["call_index"]) for l in report["layers"]] == [("", 0), ("mha", 0), ("fc", 0)]
    assert [l["metrics"]["module_flops"] for l in report["layers"] if l["path"] == "fc"] == [
        l["metrics"]["module_flops"] for l in plain["layers"] if l["path"] == "fc"]
    assert len(_slices(report["trace"], "module")) == 3
    assert report["operator_flops"]["by_operator"] == plain["operator_flops"]["by_operator"]


def test_structure_mode_traces_carry_no_flops(tmp_path):
    report = torchscan.crawl_module(_mlp(), args=(torch.randn(8, 16),), mode="structure", trace=True)
    assert all("flops" not in e["args"] for e in _slices(report["trace"]))
    from torchscan.__main__ import main

    same = tmp_path / "x.json"
    with pytest.raises(SystemExit):  # one file for both would lose the report
        main(["scan", "torchscan.examples:small_cnn", "--input-shape", "3,32,32", "--trace", str(same),
              "--output", str(same)])
    assert not same.exists()


# ------------------------------------------------------------ all threads


def _name_this_thread(name: bytes) -> None:
    """Sets the calling thread's OS name (Linux prctl PR_SET_NAME = 15), which
    an all-threads scan reads when the thread joins."""
    assert ctypes.CDLL(None).prctl(15, name, 0, 0, 0) == 0


def test_all_threads_scan_puts_each_thread_on_its_own_named_track():
    a, b = torch.ones(2, 3), torch.ones(3, 4)  # mm: 2*2*3*4 = 48 FLOPs
    errors = []

    def work():
        try:
            _name_this_thread(b"worker-py")
            torch.mm(a, b)  # its first ATen call: the thread joins the scan here
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    with torchscan.scan(threads="all", trace=True) as s:
        torch.mm(a, b)  # the starting thread: thread 1
        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
    assert not errors
    trace = s.trace()
    _check_format(trace)
    mm = {e["tid"]: e for e in _slices(trace, "operator") if e["name"] == "aten.mm"}
    # Two threads, two tracks: 1 (started the scan), 2 (joined on its mm).
    assert set(mm) == {1, 2} == {e["tid"] for e in _slices(trace)}
    assert all(e["args"]["flops"] == 48 and e["args"]["outputs"] == [[2, 4]] for e in mm.values())
    names = _thread_names(trace)
    assert names[2] == "worker-py (thread 2)" and names[1].endswith("(thread 1)")
    assert s.report()["total"]["value"] == 2 * 48
    # The same numbers as the scan report's threads.
    report = json.loads(s._session.scan_report())
    assert {t["thread"] for t in report["threads"]} == {1, 2}
    assert not _flows(trace)  # no request was opened


def test_all_threads_scan_misuse():
    with pytest.raises(ValueError, match='threads must be "current" or "all"'):
        torchscan.scan(threads="every")
    with pytest.raises(ValueError, match="memory=True covers scans of the current thread"):
        torchscan.scan(threads="all", memory=True)
    with torchscan.scan(threads="all") as s:
        torch.ones(2).add_(1)
    with pytest.raises(RuntimeError, match=r"trace=True"):
        s.trace()
    with pytest.raises(ValueError, match="cannot take trace=True"):  # sums only: no calls to draw
        torchscan.scan(threads="all", streaming=True, trace=True)
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    with torchscan.scan(threads="all", streaming=True) as s:  # all threads, folded as they go
        torch.mm(a, b)
    assert s.report()["total"]["value"] == 2 * 3 * 4 * 2


# ------------------------------------------------------------------ attach

# The example server's forward of the example CNN (tests/fixtures/serving.py:
# SmallCNN under TorchScript) makes 15 module calls: the root, then conv, bn,
# act, maxpool, grouped, act, depthwise, pointwise, act, avgpool, up, act,
# gap, fc (act four times; torch.flatten is a function, not a module).
FORWARD_MODULES = sorted(["(root)", "conv", "bn", "act", "maxpool", "grouped", "act", "depthwise", "pointwise",
                          "act", "avgpool", "up", "act", "gap", "fc"])


def test_attached_server_writes_a_trace_with_a_flow_per_request(served, tmp_path):
    requests, out, trace_path = 3, tmp_path / "attached.json", tmp_path / "trace.json"
    proc = attach(served, out, requests, 2, launcher=["--trace", str(trace_path)])
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    report = json.loads(out.read_text())
    check_report(report, served, requests)  # timing every call changes no count
    trace = json.loads(trace_path.read_text())
    _check_format(trace)
    # One track per thread that ran ATen work, numbered as the report's threads.
    tracks = {e["tid"] for e in _slices(trace)}
    assert tracks == {t["thread"] for t in report["threads"]}
    assert all(_thread_names(trace)[t].endswith(f"(thread {t})") for t in tracks)
    # Three requests (forward-1..3, one per top-level TorchScript forward),
    # three flows, each through exactly that forward's 15 module calls on
    # the worker thread that served it.
    assert len(served["crawl"]["layers"]) == len(FORWARD_MODULES)
    flows = _flows(trace)
    assert len(flows) == requests
    by_request = defaultdict(list)
    for e in _slices(trace, "module"):
        by_request[e["args"].get("request")].append(e)
    assert sorted(k for k in by_request if k) == [f"forward-{i}" for i in range(1, requests + 1)]
    for chain in flows.values():
        request = chain[0]["args"]["request"]
        assert all(e["cat"] == "module" and e["args"]["request"] == request for e in chain)
        assert sorted(e["name"] for e in chain) == FORWARD_MODULES
        assert chain[0]["name"] == "(root)" and len({e["tid"] for e in chain}) == 1
        assert sorted(id(e) for e in chain) == sorted(id(e) for e in by_request[request])
    # Operator slices nest in module slices and carry their arguments. The
    # first conv: (1,3,32,32) * (16,3,3,3) with padding 1 -> (1,16,32,32);
    # 16*32*32 outputs x 3*3*3 terms x 2 = 884,736 FLOPs.
    per_request_flops = served["flops"]["total"]["value"]  # measured in this process
    for request, modules in by_request.items():
        if not request:
            continue
        conv = next(m for m in modules if m["name"] == "conv")
        (tid,) = {m["tid"] for m in modules}
        inside = [e for e in _slices(trace, "operator") if e["tid"] == tid and conv["ts"] <= e["ts"]
                  and e["ts"] + e["dur"] <= conv["ts"] + conv["dur"] + 1e-3]
        counted = [e for e in inside if e["args"].get("flops") is not None]
        assert [e["args"]["flops"] for e in counted] == [2 * 16 * 32 * 32 * 3 * 3 * 3]
        assert [1, 3, 32, 32] in counted[0]["args"]["inputs"] and [16, 3, 3, 3] in counted[0]["args"]["inputs"]
        assert counted[0]["args"]["outputs"] == [[1, 16, 32, 32]] and counted[0]["args"]["kernel"]
        # Every counted kernel of the forward: the forward's FLOPs in all.
        ops = [e for e in _slices(trace, "operator") if e["args"].get("request") == request]
        assert sum(e["args"].get("flops") or 0 for e in ops) == per_request_flops
    # Drawn: one arrow per pair of consecutive slices of a flow, 3 x (15 - 1).
    svg = tmp_path / "trace.svg"
    run = subprocess.run([sys.executable, str(FIGURE_SCRIPT), str(trace_path), "-o", str(svg)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rects, names, arrows, _ = _svg_slices(svg.read_text())
    assert len(arrows) == requests * (len(FORWARD_MODULES) - 1)
    assert len(rects) == len(_slices(trace)) and len(names) == len(tracks)


def test_attach_trace_arguments_are_checked(tmp_path):
    launcher = REPO_ROOT / "tools/attach.py"
    same = tmp_path / "x.json"
    for extra, message in ((["--trace", str(same)], "name the same file"),
                           (["--trace", str(tmp_path)], "give the file the trace is written to"),
                           (["--trace", str(tmp_path / "missing" / "t.json")], "does not exist")):
        run = subprocess.run([sys.executable, str(launcher), "--output", str(same), *extra, "--", "/bin/true"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and message in run.stderr, run.stderr
    assert not same.exists()


# ----------------------------------------------------------- trace figure

FIGURE_SCRIPT = REPO_ROOT / "tools/trace_figure.py"


def _svg_slices(svg_text):
    import xml.etree.ElementTree as ET

    root = ET.fromstring(svg_text)
    tag = lambda e: e.tag.rsplit("}", 1)[-1]  # noqa: E731
    rects = [e for e in root.iter() if tag(e) == "rect" and "slice" in e.get("class", "")]
    tracks = [e.text for e in root.iter() if tag(e) == "text" and e.get("class") == "track-name"]
    flows = [e for e in root.iter() if tag(e) == "line" and e.get("class") == "flow"]
    # Each slice's box sits in a <g> whose <title> starts with the slice's name.
    titles = [e.text.split(" (", 1)[0] for g in root.iter() if tag(g) == "g"
              for e in g if tag(e) == "title"]
    return rects, tracks, flows, titles


def test_trace_figure_draws_every_slice_and_refuses_what_is_not_a_trace(tmp_path):
    trace = torchscan.crawl_module(_mlp(), args=(torch.randn(8, 16),), trace=True)["trace"]
    src, out = tmp_path / "t.json", tmp_path / "t.svg"
    src.write_text(json.dumps(trace))
    run = subprocess.run([sys.executable, str(FIGURE_SCRIPT), str(src), "-o", str(out), "--title", "MLP <x>"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rects, tracks, flows, _ = _svg_slices(out.read_text())
    # One box per slice: the MLP's 4 module calls ((root), 0, 1, 2), and
    # every operator slice of the trace; one track, no request, no flow.
    assert sum("module" in r.get("class") for r in rects) == 4
    assert sum("operator" in r.get("class") for r in rects) == len(_slices(trace, "operator"))
    assert tracks == ["scanned thread"] and flows == []
    bad = tmp_path / "bad.json"
    for content, message in (("{", "is not JSON"), ('{"traceEvents": 3}', "is not a trace-event file"),
                             ('{"traceEvents": [{"ph": "M"}]}', 'no complete ("X") slices')):
        bad.write_text(content)
        run = subprocess.run([sys.executable, str(FIGURE_SCRIPT), str(bad), "-o", str(out)],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and message in run.stderr, run.stderr
    run = subprocess.run([sys.executable, str(FIGURE_SCRIPT), str(tmp_path / "none.json"), "-o", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "cannot read" in run.stderr


def test_committed_trace_figure_is_the_example_models_forward():
    # tools/figures/trace_example.svg was drawn by
    #   python3 -m torchscan scan torchscan.examples:small_cnn --input-shape 3,32,32 --trace cnn.json
    #   python3 tools/trace_figure.py cnn.json -o tools/figures/trace_example.svg --title "..."
    # Times differ run to run; the slices do not: the eager SmallCNN's 15
    # module calls (the same names as the TorchScript forward's), on one track.
    rects, tracks, flows, titles = _svg_slices((REPO_ROOT / "tools/figures/trace_example.svg").read_text())
    modules = [t for r, t in zip(rects, titles) if "module" in r.get("class")]
    assert sorted(modules) == FORWARD_MODULES
    assert tracks == ["scanned thread"] and not flows
    # Nested operator calls under them, the first conv's included.
    assert "aten.conv2d" in titles and "aten.convolution" in titles


def test_python_requests_are_flows_in_a_trace():
    # Two requests of one and two mm calls: only q2 has slices to link, so one
    # flow, from its first mm to its second, each slice naming its request.
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    with torchscan.scan(trace=True) as s:
        with s.request("q1"):
            torch.mm(a, b)
        with s.request("q2"):
            torch.mm(a, b)
            torch.mm(a, b)
    trace = s.trace()
    _check_format(trace)
    mms = [e for e in _slices(trace, "operator") if e["name"] == "aten.mm"]
    assert [e["args"]["request"] for e in mms] == ["q1", "q2", "q2"]
    linked = [e for e in mms if "bind_id" in e]
    assert len(linked) == 2 and linked[0]["bind_id"] == linked[1]["bind_id"]
    assert linked[0].get("flow_out") and linked[1].get("flow_in")


def _figure_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("trace_figure", FIGURE_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _request_trace():
    """Work outside any request, then two requests of three mm calls each."""
    import time

    a, b = torch.ones(2, 3), torch.ones(3, 4)
    with torchscan.scan(trace=True) as s:
        torch.mm(a, b)  # start-up work, in no request
        time.sleep(0.02)
        for name in ("q1", "q2"):
            with s.request(name):
                for _ in range(3):
                    torch.mm(a, b)
                    time.sleep(0.005)
    return s.trace()


def test_trace_figure_draws_requests_whole_with_flows_clear_of_labels():
    import xml.etree.ElementTree as ET

    figure = _figure_module()
    trace = _request_trace()
    events = trace["traceEvents"]
    mms = [e for e in _slices(trace, "operator") if e["name"] == "aten.mm"]
    assert len(mms) == 7
    q2 = [e for e in mms if e["args"].get("request") == "q2"]
    tag = lambda e: e.tag.rsplit("}", 1)[-1]  # noqa: E731
    def mm_boxes(root):
        """The boxes of the aten.mm slices (each in a <g> whose <title> names it)."""
        return [r for g in root.iter() if tag(g) == "g" for r in g if tag(r) == "rect"
                and any(tag(t) == "title" and t.text.startswith("aten.mm ") for t in g)]

    # A window that ends inside q2 widens to its end: q2's three calls are all drawn.
    cut = q2[0]["ts"] + q2[0]["dur"] / 2
    root = ET.fromstring(figure.render(events, start=q2[0]["ts"] - 1, end=cut))
    assert len(mm_boxes(root)) == 3
    # --requests: the first request's start to the last one's end; the start-up mm is left out.
    root = ET.fromstring(figure.render(events, requests=True))
    boxes = mm_boxes(root)
    slices = [e for e in root.iter() if tag(e) == "rect" and "slice" in e.get("class", "")]
    bars = [e for e in root.iter() if tag(e) == "rect" and e.get("class") == "request"]
    names = [e.text for e in root.iter() if tag(e) == "text" and e.get("class") == "request-name"]
    assert len(boxes) == 6 and len(bars) == 2 and names == ["q1", "q2"]
    # Each bar spans its request: from its first call's start to its last call's end.
    for bar, calls in zip(bars, (boxes[:3], boxes[3:])):
        start, end = float(bar.get("x")), float(bar.get("x")) + float(bar.get("width"))
        assert abs(float(calls[0].get("x")) - start) < 0.05
        assert abs(float(calls[-1].get("x")) + float(calls[-1].get("width")) - end) < 0.6  # hairlines: 0.5 px
    # Flows: two arrows per request (three calls), each on its bar's lower
    # edge, below the bar's name and above every slice and its label.
    flows = [e for e in root.iter() if tag(e) == "line" and e.get("class") == "flow"]
    assert len(flows) == 4
    labels = [e for e in root.iter() if tag(e) == "text" and e.get("class") in ("label", "request-name")]
    for line in flows:
        y = float(line.get("y1"))
        assert y == float(line.get("y2"))
        assert any(float(b.get("y")) < y < float(b.get("y")) + float(b.get("height")) for b in bars)
        for text in labels:  # an 11 px label spans about 9 px above its baseline and 2 below
            assert not float(text.get("y")) - 9 <= y <= float(text.get("y")) + 2, text.text
        assert all(y < float(r.get("y")) for r in slices)
