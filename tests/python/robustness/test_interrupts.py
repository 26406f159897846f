"""A Ctrl-C (KeyboardInterrupt) at any point of crawl_module, summary or
measure_flops(modules=True) leaves nothing behind: the thread records again
(no recording pause, no scan, no mode key left on), the model has its hooks
and training flags as before, no global module hook is left, grad mode and
the cyclic GC are as they were, and the next call reports exactly what it
reported before any interrupt.

Interrupts are injected two ways: at the n-th Python event (function call,
line, return) inside TorchScan's code and nn.Module's call machinery, for n
swept across a whole crawl, which reaches every step between a pause and its
bookkeeping; and by a timer signal at a random moment, which also lands
right after C calls return (where Python handles signals)."""

import contextlib
import gc
import io
import random
import signal
import sys

import pytest
import torch
import torch.nn as nn
from torch.nn.modules import module as nn_module

import torchscan
from torchscan._library import Session


def _handler(module, args, kwargs, output):
    return {"module_flops": 7}


def _models():
    torch.manual_seed(0)
    small = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    small[0].train()  # a flag the crawl changes and must put back
    # Native attention: the token analysis runs paused inside the crawl.
    encoder = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    return {
        # A custom handler: it runs paused inside the crawl, after each ReLU.
        "handler": (small, lambda: torchscan.crawl_module(small, (8,), custom_modules={nn.ReLU: _handler})),
        "summary": (small, lambda: torchscan.summary(small, (8,), custom_modules={nn.ReLU: _handler})),
        "tokens": (encoder, lambda: torchscan.crawl_module(encoder, (5, 16))),
        # Process-global module hooks, installed and removed around the scan.
        "measure_modules": (small, lambda: torchscan.measure_flops(lambda: small(torch.ones(2, 8)), modules=True)),
    }


MODELS = _models()
_TRACED = ("torchscan", "torch/nn/modules/module.py")


def _run(fn):
    with contextlib.redirect_stdout(io.StringIO()):  # summary's table
        return fn()


@pytest.fixture(scope="module")
def references():
    return {name: _run(fn) for name, (_, fn) in MODELS.items()}


def _state(model):
    return ([(m.training, len(m._forward_hooks), len(m._forward_pre_hooks)) for m in model.modules()],
            len(nn_module._global_forward_hooks), len(nn_module._global_forward_pre_hooks),
            gc.isenabled(), torch.is_grad_enabled())


def _check_clean(name, model, before, reference, where):
    assert not Session.thread_recording_paused(), f"{where}: the thread's recording is left paused"
    assert not torchscan.tls_mode_included(), f"{where}: a scan is left running"
    assert _state(model) == before, f"{where}: hooks (the model's or global ones), flags, GC or grad mode changed"
    assert _run(MODELS[name][1]) == reference, f"{where}: the next crawl differs from the reference"


def _events(fn) -> int:
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        if not frame.f_code.co_filename.endswith(_TRACED) and "/torchscan/" not in frame.f_code.co_filename:
            return None
        count += 1
        return trace

    sys.settrace(trace)
    try:
        _run(fn)
    finally:
        sys.settrace(None)
    return count


def _interrupt_at(fn, n: int) -> bool:
    """Runs fn with a KeyboardInterrupt raised at its n-th traced event;
    whether it was raised (False: fn finished first)."""
    count = 0
    fired = False

    def trace(frame, event, arg):
        nonlocal count, fired
        if fired:
            return None
        if not frame.f_code.co_filename.endswith(_TRACED) and "/torchscan/" not in frame.f_code.co_filename:
            return None
        count += 1
        if count == n:
            fired = True
            raise KeyboardInterrupt
        return trace

    sys.settrace(trace)
    try:
        _run(fn)
    except KeyboardInterrupt:
        assert fired  # the injected one, not another
    finally:
        sys.settrace(None)
    return fired


@pytest.mark.parametrize("name, attempts", [("handler", 220), ("summary", 120), ("tokens", 90),
                                            ("measure_modules", 80)])
def test_an_interrupt_at_any_step_leaves_nothing_behind(name, attempts, references):
    model, fn = MODELS[name]
    before = _state(model)
    total = _events(fn)
    assert total > attempts  # the sweep spreads over the whole crawl
    fired = 0
    for k in range(attempts):
        n = 1 + k * total // attempts
        fired += _interrupt_at(fn, n)
        _check_clean(name, model, before, references[name], f"{name}, interrupt at event {n} of {total}")
    assert fired == attempts


def _on_alarm(signum, frame):
    raise KeyboardInterrupt


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs signal.setitimer")
@pytest.mark.parametrize("name, attempts", [("handler", 120), ("summary", 60), ("tokens", 40),
                                            ("measure_modules", 40)])
def test_an_interrupt_at_a_random_moment_leaves_nothing_behind(name, attempts, references):
    import time

    model, fn = MODELS[name]
    before = _state(model)
    durations = []
    for _ in range(5):
        t0 = time.perf_counter()
        _run(fn)
        durations.append(time.perf_counter() - t0)
    # The fastest of five: alarms then land inside the crawl unless it runs
    # faster than ever before. The median left every crawl that ran faster
    # than it (most of them on a loaded machine) with alarms in the sleep.
    duration = min(durations)
    rng = random.Random(27)
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    inside = 0  # alarms that landed inside the crawl (the others: in the sleep after it)
    try:
        for k in range(attempts):
            delay = rng.uniform(1e-6, duration)
            try:
                signal.setitimer(signal.ITIMER_REAL, delay)
                try:
                    try:
                        _run(fn)
                    except KeyboardInterrupt:
                        inside += 1
                        raise
                    time.sleep(duration)  # the alarm lands here when the crawl was faster
                    pytest.fail("the alarm never came")
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except KeyboardInterrupt:
                pass
            _check_clean(name, model, before, references[name], f"{name}, alarm after {delay * 1e3:.3f} ms")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert inside >= attempts // 2, (inside, attempts)


def test_a_pause_left_open_under_an_all_threads_scan_ends_with_it(torchscan):
    # An interrupt between an analysis pause and its resume, inside a
    # threads="all" scan (which gives the starting thread no scan of its own):
    # the pause has no owner, and ends when the all-threads scan stops.
    with torchscan.scan(threads="all"):
        Session.pause_thread_recording()  # never resumed, as after a Ctrl-C
        assert Session.thread_recording_paused()
    assert not Session.thread_recording_paused()
    # The next scan records: mm (2,3)@(3,4), 2*3*4*2 = 48 FLOPs.
    with torchscan.scan() as s:
        torch.mm(torch.ones(2, 3), torch.ones(3, 4))
    assert s.report()["total"] == {**s.report()["total"], "status": "complete", "value": 48}


def test_the_analysis_pause_is_one_library_call_each_way_and_nests(torchscan):
    # crawl_module's AnalysisPause pauses through the library's C entry
    # points where it has them: the same pause as the custom class's
    # (nested pauses resume in order; the outer one still holds).
    from torchscan._library import entry_point
    from torchscan._modules import AnalysisPause

    pause = AnalysisPause()
    if entry_point("torchscan_pause_thread_recording") is not None:
        assert pause._pause is entry_point("torchscan_pause_thread_recording")
        assert pause._resume is entry_point("torchscan_resume_thread_recording")
    x = torch.ones(2, 3)
    with torchscan.scan() as s:
        torch.add(x, x)  # counted
        with pause:
            assert Session.thread_recording_paused() and pause.depth == 1
            torch.add(x, x)
            with pause:
                torch.add(x, x)
            assert Session.thread_recording_paused() and pause.depth == 1
            torch.add(x, x)
        assert not Session.thread_recording_paused() and pause.depth == 0
        torch.add(x, x)  # counted
    # Two adds of 2*3 elements, one FLOP each: 12.
    assert s.report()["total"] == {**s.report()["total"], "status": "complete", "value": 12}
