"""crawl_module has the library write a stopped scan's rows and reports on a
thread of its own while Python builds its part of the report (Note [Reports
prepared on a second thread] in integrations/bindings.cc). The reports are
those written without it, in every mode; a preparation nobody takes, an
interrupt before the take, concurrent crawls and a forked child lose
nothing and leak nothing. Timings are in tools/benchmark.py (part h)."""

import json
import os
import subprocess
import sys
import threading

import pytest
import torch
import torch.nn as nn

import torchscan
from tests.fixtures.models import mobilenet_v3_small
from torchscan import _layers, crawler
from torchscan.flops import FlopScan


def _without_trace(report: dict) -> str:
    # A trace's timestamps differ between any two crawls.
    return json.dumps({k: v for k, v in report.items() if k != "trace"})


def _spy(monkeypatch) -> list:
    """The preparations crawl_module asked for: (which, started)."""
    asked = []
    real = crawler.prepare

    def prepare(handle, which):
        started = real(handle, which)
        asked.append((which, started))
        return started

    monkeypatch.setattr(crawler, "prepare", prepare)
    return asked


class _Stack(nn.Module):
    """40 module calls: past the number below which nothing is prepared."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU()) for _ in range(13))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


@pytest.mark.parametrize("options", [
    {}, {"mode": "structure"}, {"memory": True}, {"trace": True},
    {"custom_modules": {nn.ReLU: lambda m, a, k, out: {"module_flops": 5, "macs": 0, "dmas": 2}}},
], ids=["full", "structure", "memory", "trace", "handlers"])
@pytest.mark.parametrize("build", [mobilenet_v3_small, _Stack], ids=["mobilenet", "stack"])
def test_prepared_reports_are_the_reports_written_without(monkeypatch, build, options):
    torch.manual_seed(0)
    model = build().eval()
    x = torch.rand(1, 4 if build is _Stack else 3, 32, 32)
    asked = _spy(monkeypatch)
    prepared = torchscan.crawl_module(model, args=(x,), **options)
    # Asked once, for the rows and, in the full mode, both reports; started.
    assert asked == [(4 if options.get("mode") == "structure" else 7, True)]
    monkeypatch.setattr(crawler, "prepare", lambda handle, which: False)
    written = torchscan.crawl_module(model, args=(x,), **options)
    assert _without_trace(prepared) == _without_trace(written)
    if "trace" in options:
        assert [e["name"] for e in prepared["trace"]["traceEvents"]] == [
            e["name"] for e in written["trace"]["traceEvents"]]


def test_small_crawls_and_caller_formulas_prepare_nothing(monkeypatch):
    asked = _spy(monkeypatch)
    torchscan.crawl_module(nn.Sequential(nn.Linear(3, 3), nn.ReLU()), args=(torch.rand(2, 3),))
    # A caller formula changes the reports once resolved: written after it.
    torchscan.crawl_module(_Stack(), args=(torch.rand(1, 4, 8, 8),),
                           custom_mapping={torch.ops.aten.relu: lambda *a, **k: 1})
    assert asked == []


def test_the_entry_point_refuses_what_it_cannot_prepare():
    scan = FlopScan(scope="forward")
    handle = scan._session.native_handle()
    assert _layers.prepare(handle, 7) is False  # never started: no report to write
    with scan:
        torch.rand(2) + 1
        assert _layers.prepare(handle, 7) is False  # running
    from torchscan._library import entry_point

    raw = entry_point("torchscan_reports_prepare")
    assert raw(handle, 0) == -1 and raw(handle, 8) == -1  # no such stream
    assert raw(handle + 1000, 7) == -1  # no such session
    assert raw(handle, 7) == 0
    assert raw(handle, 7) == 0  # again: the first is waited for, then replaced
    # What was prepared is what the entry points write.
    prepared = _layers._native_reports(handle, 3)
    assert prepared is not None and prepared == _layers._native_reports(handle, 3)


def test_the_streams_are_the_same_in_any_order_of_taking():
    # The rows are handed over as soon as they are written, without waiting
    # for the reports; each stream is the one written without preparation,
    # whichever is taken first, and the rows taken twice are written again.
    scan = FlopScan(scope="forward")
    with scan:
        torch.rand(8, 8) @ torch.rand(8, 8)
        torch.relu(torch.rand(3))
    handle = scan._session.native_handle()
    rows, reports = _layers._module_rows(scan._session, handle), _layers._native_reports(handle, 3)
    assert rows is not None and reports is not None
    for which, order in ((7, "rows"), (7, "reports"), (4, "rows"), (4, "reports"), (3, "rows")):
        assert _layers.prepare(handle, which)
        if order == "rows":
            assert _layers._module_rows(scan._session, handle) == rows
            assert _layers._module_rows(scan._session, handle) == rows  # taken: written again
            assert _layers._native_reports(handle, 3) == reports
        else:
            assert _layers._native_reports(handle, 3) == reports
            assert _layers._module_rows(scan._session, handle) == rows
        assert _layers._native_reports(handle, 1) == reports[:1]  # another stream than the prepared one


def test_a_preparation_never_taken_goes_with_its_session():
    for _ in range(20):
        scan = FlopScan(scope="forward")
        with scan:
            torch.rand(4, 4) @ torch.rand(4, 4)
        assert _layers.prepare(scan._session.native_handle(), 7)
        del scan  # the session waits for its stream before it goes


def test_an_interrupt_before_the_take_leaves_nothing_behind(monkeypatch):
    model = _Stack().eval()
    x = torch.rand(1, 4, 8, 8)
    expected = torchscan.crawl_module(model, args=(x,))
    asked = _spy(monkeypatch)

    def interrupted(modules):
        raise KeyboardInterrupt

    monkeypatch.setattr(crawler, "Parameters", interrupted)
    with pytest.raises(KeyboardInterrupt):
        torchscan.crawl_module(model, args=(x,))
    assert asked == [(7, True)]
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    monkeypatch.undo()
    assert _without_trace(torchscan.crawl_module(model, args=(x,))) == _without_trace(expected)


def test_concurrent_crawls_take_their_own_streams():
    torch.manual_seed(0)
    models = [_Stack().eval(), mobilenet_v3_small().eval(), _Stack().eval()]
    inputs = [torch.rand(1, 4, 8, 8), torch.rand(1, 3, 32, 32), torch.rand(1, 4, 12, 12)]
    expected = [_without_trace(torchscan.crawl_module(m, args=(x,))) for m, x in zip(models, inputs)]
    got: dict = {}
    errors: list = []

    def crawl(i):
        try:
            for round in range(3):
                got[(i, round)] = _without_trace(torchscan.crawl_module(models[i], args=(inputs[i],)))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=crawl, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(got[(i, r)] == expected[i] for i in range(3) for r in range(3))


_FORKED = r"""
import json, os, sys
sys.path.insert(0, {root!r})
import torch, torchscan
torch.set_num_threads(1)  # OpenMP's thread team does not survive a fork: none is started
from tests.python.modules.test_prepared_streams import _Stack, _without_trace
from torchscan import crawler
model, x = _Stack().eval(), torch.rand(1, 4, 8, 8)
before = _without_trace(torchscan.crawl_module(model, args=(x,)))  # the writing thread runs from here
pid = os.fork()
if pid == 0:  # the thread did not survive the fork: the child starts its own
    asked = []
    real = crawler.prepare
    crawler.prepare = lambda h, w: asked.append(real(h, w)) or asked[-1]
    same = _without_trace(torchscan.crawl_module(model, args=(x,))) == before
    os._exit(0 if same and asked == [True] else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_prepares_on_a_thread_of_its_own():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = subprocess.run([sys.executable, "-c", _FORKED.format(root=root)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "child 0" in out.stdout, (out.stdout, out.stderr[-2000:])


_FORK_WHILE_CRAWLING = r"""
import os, sys, threading
sys.path.insert(0, {root!r})
import torch, torchscan
torch.set_num_threads(1)
from tests.python.modules.test_prepared_streams import _Stack
model, x = _Stack().eval(), torch.rand(1, 4, 8, 8)
# PyTorch makes each operator's handle on its first call (a function-local
# static): a fork that lands during that first call leaves the child
# waiting on the initialization forever, with or without TorchScan. Every
# operator the crawl runs is called once before the other thread starts.
torchscan.crawl_module(model, args=(x,))
stop = threading.Event()

def crawl():  # prepares, and takes, its streams again and again
    while not stop.is_set():
        torchscan.crawl_module(model, args=(x,))

t = threading.Thread(target=crawl)
t.start()
codes = []
for _ in range(20):
    pid = os.fork()
    if pid == 0:  # whatever the other thread's crawl left here is freed without waiting on a thread that is gone
        import gc
        gc.collect()
        report = torchscan.crawl_module(model, args=(x,))
        os._exit(0 if report["totals"]["module_flops"]["status"] == "complete" else 3)
    codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
stop.set()
t.join()
print("children", codes)
"""


def test_a_fork_while_another_thread_crawls_leaves_the_child_whole():
    """A fork can land while another thread's streams are being written: the
    child, which has no writing thread, starts its own and crawls whole."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = subprocess.run([sys.executable, "-c", _FORK_WHILE_CRAWLING.format(root=root)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "children [" + ", ".join(["0"] * 20) + "]" in out.stdout, (out.stdout, out.stderr[-2000:])
