"""Traces (scan(trace=True), crawl_module(trace=True)): the trace-event JSON
format (complete "X" slices with ts/dur in microseconds on one track) and the
arguments each slice carries, derived by hand for a small MLP."""
import json

import pytest
import torch
import torch.nn as nn

import torchscan


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def _slices(trace, cat=None):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (cat is None or e["cat"] == cat)]


def _check_format(trace):
    json.dumps(trace, allow_nan=False)  # loads in any trace viewer: plain JSON
    slices = _slices(trace)
    assert slices
    for e in slices:
        assert {"ph", "ts", "dur", "pid", "tid", "name", "cat", "args"} <= set(e)
        assert e["ts"] >= 0 and e["dur"] >= 0
    # Complete events on one track must nest: any two are disjoint or one
    # contains the other (ends compared with a rounding margin of 1 ns).
    for a in slices:
        for b in slices:
            a0, a1, b0, b1 = a["ts"], a["ts"] + a["dur"], b["ts"], b["ts"] + b["dur"]
            disjoint = a1 <= b0 + 1e-3 or b1 <= a0 + 1e-3
            nested = (a0 <= b0 and b1 <= a1 + 1e-3) or (b0 <= a0 and a1 <= b1 + 1e-3)
            assert disjoint or nested, (a, b)


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
