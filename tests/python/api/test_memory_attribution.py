"""Memory attributed to module calls and operators from the allocator's own
reports (crawl_module(memory=True), scan(memory=True)). Expected bytes are the
tensors' sizes worked out by hand (float32: 4 bytes, int64: 8 bytes)."""
import json

import pytest
import torch
import torch.nn as nn

import torchscan
from torchscan.flops import tls_mode_included


def _layers(report):
    return {(l["path"], l["call_index"]): l["metrics"] for l in report["layers"]}


def _bytes(metrics, name):
    m = metrics[name]
    assert m["status"] == "complete", m
    assert m["unit"] == "bytes" and m["method"] == "allocator_reports"
    return m["value"]


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))


def test_mlp_layers_equal_their_activations():
    model, x = _mlp(), torch.randn(32, 256)
    report = torchscan.crawl_module(model, args=(x,), memory=True)
    layers = _layers(report)
    # Linear(256, 512) on 32 rows: 32 * 512 floats = 65536 bytes, its only block.
    assert _bytes(layers[("0", 0)], "peak_memory") == _bytes(layers[("0", 0)], "allocated_bytes") == 65536
    # ReLU (not in place): a new 65536-byte output.
    assert _bytes(layers[("1", 0)], "allocated_bytes") == 65536
    # Linear(512, 10): 32 * 10 floats = 1280 bytes.
    assert _bytes(layers[("2", 0)], "allocated_bytes") == 1280
    # The whole forward: the first Linear's output and ReLU's are alive together
    # (Sequential drops the first once ReLU has returned): 131072 at most; only
    # the 1280-byte output is left when it returns.
    assert _bytes(layers[("", 0)], "peak_memory") == 131072
    assert _bytes(layers[("", 0)], "allocated_bytes") == 1280
    assert report["totals"]["peak_memory"]["value"] == 131072
    assert report["memory"]["by_operator"]["aten.linear"]["allocated_bytes"] == 65536 + 1280
    json.dumps(report, allow_nan=False)  # the report stays JSON


def test_scan_peak_equals_the_profilers_on_the_same_call():
    # measure_peak_memory (torch.profiler's memory events) sees the same
    # allocator blocks, so the two agree exactly here: 131072 bytes.
    model, x = _mlp(), torch.randn(32, 256)
    with torch.no_grad():
        profiled = torchscan.measure_peak_memory(lambda: model(x))["peak_memory"]["value"]
    scanned = torchscan.crawl_module(model, args=(x,), memory=True)["totals"]["peak_memory"]["value"]
    assert profiled == scanned == 131072


def test_small_cnn_layers():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(512, 10))
    layers = _layers(torchscan.crawl_module(model, args=(torch.randn(2, 3, 16, 16),), memory=True))
    # Conv and BatchNorm outputs: 2 * 8 * 16 * 16 floats = 16384 bytes each, kept.
    assert _bytes(layers[("0", 0)], "allocated_bytes") == 16384
    assert _bytes(layers[("1", 0)], "allocated_bytes") == 16384
    # ReLU(inplace=True) writes into its input and Flatten is a view: nothing allocated.
    assert _bytes(layers[("2", 0)], "peak_memory") == _bytes(layers[("2", 0)], "allocated_bytes") == 0
    assert _bytes(layers[("4", 0)], "peak_memory") == 0
    # MaxPool2d(2): output 2 * 8 * 8 * 8 floats = 4096 bytes kept; the CPU
    # kernel also computes the argmax indices (as many int64s, 8192 bytes),
    # freed before it returns, so its peak is 4096 + 8192.
    assert _bytes(layers[("3", 0)], "allocated_bytes") == 4096
    assert _bytes(layers[("3", 0)], "peak_memory") == 12288
    # Linear(512, 10) on 2 rows: 80 bytes; the forward returns just that.
    assert _bytes(layers[("5", 0)], "allocated_bytes") == 80
    assert _bytes(layers[("", 0)], "allocated_bytes") == 80
    # A parent's peak covers each child's.
    assert _bytes(layers[("", 0)], "peak_memory") >= max(_bytes(m, "peak_memory") for m in layers.values())


def test_summary_shows_memory_columns(capsys):
    torchscan.summary(_mlp(), args=(torch.randn(32, 256),), memory=True)
    out = capsys.readouterr().out
    assert "Peak mem" in out and "Kept" in out
    assert "128.00KiB" in out  # 131072 bytes
    assert "1.25KiB" in out  # 1280 bytes


def test_training_step_by_operator():
    x = torch.randn(8, 16)
    w = torch.randn(16, 4, requires_grad=True)
    with torchscan.scan(memory=True) as s:
        loss = (x @ w).relu().sum()
        loss.backward()
    ops = s.memory_report()["by_operator"]
    # Forward: x @ w is 8 * 4 floats = 128 bytes, relu another 128, the sum 4.
    assert ops["aten.matmul"]["allocated_bytes"] == 128
    assert ops["aten.relu"]["allocated_bytes"] == 128
    assert ops["aten.sum"]["allocated_bytes"] == 4
    # Backward: the seed gradient (4 bytes), relu's gradient (128) and w.grad,
    # x.T @ grad: 16 * 4 floats = 256 bytes, which outlives the step.
    assert ops["aten.ones_like"]["allocated_bytes"] == 4
    assert ops["aten.threshold_backward"]["allocated_bytes"] == 128
    assert ops["aten.mm"]["allocated_bytes"] == 256
    assert all(op["temporary_bytes"] == 0 for op in ops.values())


def test_meta_is_unavailable_not_zero():
    model = _mlp().to("meta")
    report = torchscan.crawl_module(model, input_shape=(256,), memory=True)
    assert report["totals"]["peak_memory"]["status"] == "unavailable"
    assert report["totals"]["peak_memory"]["value"] is None
    assert "memory_device_unsupported" in [d["code"] for d in report["diagnostics"]]
    assert all(l["metrics"]["peak_memory"]["status"] == "unavailable" for l in report["layers"])
    with pytest.raises(RuntimeError, match="peak_memory"):
        torchscan.crawl_module(model, input_shape=(256,), memory=True, strict=True)


def test_a_running_profiler_keeps_its_reports():
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        report = torchscan.crawl_module(_mlp(), args=(torch.randn(4, 256),), memory=True)
    assert report["totals"]["peak_memory"]["status"] == "unavailable"
    assert "memory_observer_unavailable" in [d["code"] for d in report["diagnostics"]]
    # The profiler saw the forward's allocations (32 * ... any positive figure).
    assert any(getattr(e, "cpu_memory_usage", 0) > 0 for e in prof.events())


def test_a_profiler_cannot_start_inside_and_nothing_is_left_behind():
    from torch.profiler import ProfilerActivity, profile

    # PyTorch allows one allocator observer per thread: the profiler refuses
    # to start, and its own error reaches the caller unchanged.
    with pytest.raises(RuntimeError, match="already enabled"):
        with torchscan.scan(memory=True):
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
                torch.ones(10)
    assert not tls_mode_included()
    assert not torch.autograd._profiler_enabled()
    if _profiler_breaks_after_its_own_refusal():
        pytest.skip("this torch's profiler does not start again after refusing to start inside another "
                    "profiler, with no TorchScan loaded (Kineto left prepared)")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        torch.ones(10)
    assert len(prof.events()) > 0  # the slot is free again


def _profiler_breaks_after_its_own_refusal() -> bool:
    # torch 2.11: a profiler refused inside another one leaves Kineto in a
    # state where the next profiler fails ("Can't disable Kineto profiler when
    # it's not running"). Checked in a process without TorchScan; releases
    # from 2.13 on recover, so only older ones pay for the check.
    if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13):
        return False
    import subprocess
    import sys

    code = ("import torch\nfrom torch.profiler import profile\n"
            "with profile() as a:\n"
            "    try:\n"
            "        with profile() as b: torch.ones(3)\n"
            "    except RuntimeError: pass\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode != 0


def test_a_raising_forward_propagates_and_leaves_nothing_behind():
    class Boom(nn.Module):
        def forward(self, x):
            torch.ones(100)
            raise KeyError("boom")

    model = nn.Sequential(nn.Linear(4, 4), Boom())
    err = None
    with pytest.raises(KeyError) as info:
        torchscan.crawl_module(model, input_shape=(4,), memory=True)
    err = info.value
    assert err.args == ("boom",)
    assert not tls_mode_included()
    assert not model[0]._forward_hooks and not model[0]._forward_pre_hooks
    # The allocator-reporting slot is empty again: a new memory scan is complete.
    with torchscan.scan(memory=True) as s:
        keep = torch.ones(100)  # 400 bytes
    assert s.memory_report()["totals"]["allocated_bytes"] == {
        "status": "complete", "value": 400, "known_value": 400, "unit": "bytes", "scope": "workload",
        "method": "allocator_reports"}
    del keep


def test_nested_scans_each_hold_their_own_blocks():
    with torchscan.scan(memory=True) as outer:
        a = torch.ones(100)  # 400 bytes
        with torchscan.scan(memory=True) as inner:
            b = torch.ones(200)  # 800 bytes
    assert outer.memory_report()["totals"]["peak_memory"]["value"] == 1200
    assert inner.memory_report()["totals"]["peak_memory"]["value"] == 800
    del a, b


def test_reports_with_memory_render_and_diff():
    model, x = _mlp(), torch.randn(32, 256)
    before = torchscan.crawl_module(model, args=(x,), memory=True)
    after = torchscan.crawl_module(model, args=(x,), memory=True)
    diff = torchscan.compare_reports(before, after)
    assert diff["layers"]
    assert "Peak mem" in torchscan.render_report(before)


def test_misuse_is_refused():
    with pytest.raises(TypeError, match="memory must be True or False"):
        torchscan.crawl_module(_mlp(), input_shape=(256,), memory="yes")
    with pytest.raises(TypeError, match="memory must be True or False"):
        torchscan.scan(memory=1)
    with torchscan.scan() as s:
        torch.ones(1)
    with pytest.raises(RuntimeError, match=r"memory=True \(Python\)"):
        s.memory_report()


def test_blocks_freed_on_another_thread_make_it_unavailable():
    import threading

    # The allocator reports a free only to an observer on the freeing thread.
    # 4000-byte blocks freed by a plain thread: their frees are never seen,
    # and an address handed out again shows they were freed. A fresh process
    # may not hand one out again within five blocks (a run in six failed);
    # fifty always did in thirty fresh runs.
    with torchscan.scan(memory=True) as s:
        for _ in range(50):
            holder = [torch.ones(1000)]
            t = threading.Thread(target=holder.clear)
            t.start()
            t.join()
    report = s.memory_report()
    assert report["totals"]["peak_memory"]["status"] == "unavailable"
    assert "memory_free_unseen" in [d["code"] for d in report["diagnostics"]]
