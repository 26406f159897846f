"""Scan lifecycle: TLS state, exceptions, nesting, threads, scan().report().

Reference counts used throughout (2 FLOPs per multiply-add, i.e. 2K per
K-term dot, as FlopCounterMode counts them):
  mm  (3,4)@(4,5)        -> 2*3*4*5   = 120
  bmm (2,3,4)@(2,4,5)    -> 2*2*3*4*5 = 240
"""

import json
import threading

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules import module as nn_module

MM = 120
BMM = 240
WAIT = 30  # seconds; generous, only hit when something deadlocks


@pytest.fixture
def mats():
    torch.manual_seed(0)
    return torch.randn(3, 4), torch.randn(4, 5)


@pytest.fixture
def bmats():
    torch.manual_seed(1)
    return torch.randn(2, 3, 4), torch.randn(2, 4, 5)


class BoomError(Exception):
    """A user exception type TorchScan cannot know about."""


class Boom(nn.Module):
    def __init__(self, error):
        super().__init__()
        self.error = error

    def forward(self, x):
        x = F.relu(x)  # some work inside the failing module first
        raise self.error


def _hook_counts(model):
    globals_ = tuple(
        len(getattr(nn_module, name))
        for name in (
            "_global_forward_pre_hooks",
            "_global_forward_hooks",
            "_global_backward_pre_hooks",
            "_global_backward_hooks",
        )
    )
    local = [
        (len(m._forward_pre_hooks), len(m._forward_hooks), len(m._backward_pre_hooks), len(m._backward_hooks))
        for m in model.modules()
    ]
    return globals_, local


def _module_state(model):
    return [(name, m.training) for name, m in model.named_modules()] + [
        (name, p.requires_grad) for name, p in model.named_parameters()
    ]


def _assert_tls_clean(torchscan, checks):
    assert torchscan.tls_mode_included() is False
    assert not checks.include_set_has_mode_key()


# ------------------------------------------------------------------- TLS


def test_tls_mode_included_only_during_scan(torchscan, checks, mats):
    _assert_tls_clean(torchscan, checks)
    seen = []
    torchscan.measure_flops(
        lambda: seen.append((torchscan.tls_mode_included(), checks.include_set_has_mode_key()))
    )
    assert seen == [(True, True)]
    _assert_tls_clean(torchscan, checks)

    with torchscan.scan():
        assert torchscan.tls_mode_included() is True
        assert checks.include_set_has_mode_key()
    _assert_tls_clean(torchscan, checks)


def test_scan_restores_preexisting_include_set(torchscan):
    before = str(torch._C._dispatch_tls_local_include_set())
    with torchscan.scan():
        pass
    torchscan.measure_flops(lambda: None)
    assert str(torch._C._dispatch_tls_local_include_set()) == before


# ------------------------------------------------------------ exceptions


def test_workload_exception_propagates_unchanged(torchscan, checks, mats):
    a, b = mats
    error = ValueError("workload failed on purpose")

    def workload():
        y = torch.mm(a, b)
        torch.relu(y)
        raise error

    with pytest.raises(ValueError) as excinfo:
        torchscan.measure_flops(workload)
    assert excinfo.value is error
    assert type(excinfo.value) is ValueError
    assert str(excinfo.value) == "workload failed on purpose"
    _assert_tls_clean(torchscan, checks)

    # A fresh measurement is not polluted by the aborted one.
    report = torchscan.measure_flops(lambda: torch.mm(a, b))
    checks.assert_valid_report(report)
    assert report["by_operator"] == {"aten.mm": MM}
    assert report["total"]["status"] == "complete"
    assert report["total"]["value"] == MM


def test_exception_from_nested_module_forward(torchscan, checks):
    torch.manual_seed(0)
    error = BoomError("raised inside model.1.1")
    model = nn.Sequential(nn.Linear(4, 6), nn.Sequential(nn.Linear(6, 6), Boom(error)))
    x = torch.randn(2, 4)

    for training in (True, False):
        model.train(training)
        model[1][0].train(not training)  # mixed flags must survive untouched
        state, hooks = _module_state(model), _hook_counts(model)

        with pytest.raises(BoomError) as excinfo:
            torchscan.measure_flops(lambda: model(x))
        assert excinfo.value is error

        _assert_tls_clean(torchscan, checks)
        assert _module_state(model) == state
        assert _hook_counts(model) == hooks

    # The healthy part of the model still measures exactly like FlopCounterMode.
    healthy = model[0]
    fcm_counts, fcm_total = checks.run_flop_counter(lambda: healthy(x))
    report = torchscan.measure_flops(lambda: healthy(x))
    checks.assert_valid_report(report)
    checks.assert_parity(report, fcm_counts)
    assert report["total"]["status"] == "complete"
    assert report["total"]["value"] == fcm_total == 2 * 2 * 4 * 6  # addmm (2,4)@(4,6)


class _FailingBackward(torch.autograd.Function):
    error = None

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise _FailingBackward.error


def test_exception_from_backward_propagates_unchanged(torchscan, checks, mats):
    # Plain torch hands the very same exception object back from backward();
    # scanning the backward pass must not change that.
    a, b = mats
    error = BoomError("raised in backward")
    _FailingBackward.error = error
    x = torch.randn(3, requires_grad=True)

    with pytest.raises(BoomError) as excinfo:
        torchscan.measure_flops(lambda: _FailingBackward.apply(x).sum().backward())
    assert excinfo.value is error
    _assert_tls_clean(torchscan, checks)
    assert torchscan.measure_flops(lambda: torch.mm(a, b))["by_operator"] == {"aten.mm": MM}


def test_successful_scan_leaves_module_state_and_hooks(torchscan):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    x = torch.randn(2, 4)
    model.train()
    model[2].eval()
    state, hooks = _module_state(model), _hook_counts(model)
    torchscan.measure_flops(lambda: model(x).sum().backward())
    assert _module_state(model) == state
    assert _hook_counts(model) == hooks


def test_exception_inside_scan_context_propagates(torchscan, checks, mats):
    a, b = mats
    error = BoomError("inside scan()")
    with pytest.raises(BoomError) as excinfo:
        with torchscan.scan():
            torch.mm(a, b)
            raise error
    assert excinfo.value is error
    _assert_tls_clean(torchscan, checks)
    assert torchscan.measure_flops(lambda: torch.mm(a, b))["by_operator"] == {"aten.mm": MM}


def test_keyboard_interrupt_propagates_and_cleans_up(torchscan, checks, mats):
    a, b = mats

    def workload():
        torch.mm(a, b)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        torchscan.measure_flops(workload)
    _assert_tls_clean(torchscan, checks)


def test_exception_inside_nested_scan_restores_outer(torchscan, checks, mats, bmats):
    a, b = mats
    x, y = bmats

    def failing_inner():
        torch.bmm(x, y)
        raise BoomError("inner")

    with torchscan.scan() as outer:
        with pytest.raises(BoomError):
            torchscan.measure_flops(failing_inner)
        # The inner scan's exit must not switch off the still-active outer scan.
        assert torchscan.tls_mode_included() is True
        torch.mm(a, b)
    _assert_tls_clean(torchscan, checks)
    report = outer.report()
    checks.assert_valid_report(report)
    # Outer counts its own mm plus the inner (aborted) bmm work.
    assert report["by_operator"] == {"aten.mm": MM, "aten.bmm": BMM}


# ------------------------------------------------------- scan().report()


def test_report_is_unavailable_while_scan_active(torchscan, mats):
    a, b = mats
    with torchscan.scan() as s:
        torch.mm(a, b)
        with pytest.raises(RuntimeError):
            s.report()
    first = s.report()
    assert first["by_operator"] == {"aten.mm": MM}
    assert s.report() == first  # repeatable after exit


def test_scan_report_equals_measure_flops_report(torchscan, checks, mats):
    a, b = mats

    def workload():
        torch.relu(torch.mm(a, b.t().t()))

    with torchscan.scan() as s:
        workload()
    from_scan = s.report()
    from_measure = torchscan.measure_flops(workload)
    checks.assert_valid_report(from_scan)
    assert from_scan == from_measure


# ----------------------------------------------------------------- nesting


def test_nested_scans_inner_counts_inner_outer_counts_both(torchscan, checks, mats, bmats):
    a, b = mats
    x, y = bmats
    with torchscan.scan() as outer:
        torch.mm(a, b)
        with torchscan.scan() as inner:
            torch.bmm(x, y)
            assert torchscan.tls_mode_included() is True
        assert torchscan.tls_mode_included() is True  # outer still on
        inner_report = inner.report()  # inner has exited: allowed
        torch.mm(a, b)
    _assert_tls_clean(torchscan, checks)
    outer_report = outer.report()

    checks.assert_valid_report(inner_report)
    checks.assert_valid_report(outer_report)
    assert inner_report["by_operator"] == {"aten.bmm": BMM}
    assert inner_report["total"]["status"] == "complete"
    assert inner_report["total"]["value"] == BMM
    assert outer_report["by_operator"] == {"aten.mm": 2 * MM, "aten.bmm": BMM}
    assert outer_report["total"]["status"] == "complete"
    assert outer_report["total"]["value"] == 2 * MM + BMM


def test_nested_measure_flops_inside_scan_with_uncounted_work(torchscan, checks, mats):
    a, b = mats
    with torchscan.scan() as outer:
        inner_report = torchscan.measure_flops(lambda: torch.ops.aten._upsample_bilinear2d_aa(
            torch.mm(a, b)[None, None], [2, 2], False, None))
        torch.mm(a, b)
    outer_report = outer.report()

    checks.assert_valid_report(inner_report)
    checks.assert_valid_report(outer_report)
    assert inner_report["by_operator"]["aten.mm"] == MM
    assert inner_report["total"]["status"] == "partial"
    assert checks.uncounted(inner_report).get("aten._upsample_bilinear2d_aa") == 1
    # The outer scan saw the inner var too, so it is partial as well.
    assert outer_report["by_operator"]["aten.mm"] == 2 * MM
    assert outer_report["total"]["status"] == "partial"
    assert checks.uncounted(outer_report).get("aten._upsample_bilinear2d_aa") == 1
    # Everything the inner scan counted, the outer counted too.
    for op, value in inner_report["by_operator"].items():
        assert outer_report["by_operator"].get(op, 0) >= value, op


# ----------------------------------------------------------------- threads


def _run_thread(target):
    errors = []

    def wrapper():
        try:
            target()
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    thread = threading.Thread(target=wrapper, daemon=True)
    thread.start()
    return thread, errors


def _join(thread, errors):
    thread.join(WAIT)
    assert not thread.is_alive(), "worker thread hung"
    if errors:
        raise errors[0]


def test_scan_does_not_record_other_threads_work(torchscan, checks, mats, bmats):
    a, b = mats
    x, y = bmats
    scan_on = threading.Event()
    worker_done = threading.Event()
    worker_saw = []

    def worker():
        assert scan_on.wait(WAIT)
        worker_saw.append(torchscan.tls_mode_included())
        for _ in range(3):
            torch.bmm(x, y)  # concurrent with the main thread's scan
        worker_done.set()

    thread, errors = _run_thread(worker)
    with torchscan.scan() as s:
        scan_on.set()
        assert worker_done.wait(WAIT)
        torch.mm(a, b)
    _join(thread, errors)

    report = s.report()
    checks.assert_valid_report(report)
    assert worker_saw == [False]  # TLS is per thread
    assert report["by_operator"] == {"aten.mm": MM}
    assert report["total"]["value"] == MM


def test_scan_in_worker_thread_records_only_that_thread(torchscan, checks, mats, bmats):
    a, b = mats
    x, y = bmats
    worker_scanning = threading.Event()
    main_done = threading.Event()
    result = {}

    def worker():
        with torchscan.scan() as s:
            worker_scanning.set()
            assert main_done.wait(WAIT)  # main thread works while this scan is on
            torch.bmm(x, y)
        result["report"] = s.report()
        result["tls_after"] = torchscan.tls_mode_included()

    thread, errors = _run_thread(worker)
    assert worker_scanning.wait(WAIT)
    assert torchscan.tls_mode_included() is False
    torch.mm(a, b)  # unscanned, in the main thread
    with torchscan.scan() as main_scan:  # two scans on two threads at once
        torch.mm(a, b)
        torch.mm(a, b)
    main_done.set()
    _join(thread, errors)

    worker_report = result["report"]
    checks.assert_valid_report(worker_report)
    assert worker_report["by_operator"] == {"aten.bmm": BMM}
    assert worker_report["total"]["value"] == BMM
    assert result["tls_after"] is False

    main_report = main_scan.report()
    checks.assert_valid_report(main_report)
    assert main_report["by_operator"] == {"aten.mm": 2 * MM}


def test_measure_flops_in_worker_thread_with_backward(torchscan, checks):
    # The autograd engine may run backward on its own threads; the scan started
    # in the worker must still see the backward operators.
    def fresh_workload():
        torch.manual_seed(0)
        model, inp = nn.Linear(4, 3), torch.randn(2, 4, requires_grad=True)
        return lambda: model(inp).sum().backward()

    fcm_counts, _ = checks.run_flop_counter(fresh_workload())
    # addmm (2,4)@(4,3) = 2*2*4*3 = 48; grad_input mm (2,3)@(3,4) = 48;
    # grad_weight mm (3,2)@(2,4) = 48.
    assert fcm_counts == {"aten.addmm": 48, "aten.mm": 96}

    result = {}
    workload = fresh_workload()
    thread, errors = _run_thread(lambda: result.update(report=torchscan.measure_flops(workload)))
    _join(thread, errors)
    report = result["report"]
    checks.assert_valid_report(report)
    checks.assert_parity(report, fcm_counts)


def test_forked_work_in_other_threads_is_flagged_not_silently_dropped(torchscan):
    """TorchScript's fork runs `work` on an inter-op thread that inherits the
    scan's dispatch state; that thread has no scan, so its mm is not counted
    and the report says so instead of looking complete."""

    @torch.jit.script
    def work(a, b):
        return torch.mm(a, b)

    @torch.jit.script
    def run(a, b):
        fut = torch.jit.fork(work, a, b)
        c = torch.mm(a, b)
        return torch.jit.wait(fut) + c

    a, b = torch.ones(20, 30), torch.ones(30, 40)
    run(a, b)  # warm up the scripted functions outside the scan
    report = torchscan.measure_flops(lambda: run(a, b))
    # only the main thread's mm: 20*40 outputs x 30 terms x 2 = 48000
    assert report["by_operator"]["aten.mm"] == 48000
    assert report["total"]["status"] == "partial"
    codes = [d["code"] for d in report["diagnostics"]]
    assert "unattributed_thread_work" in codes


def test_forked_copies_in_other_threads_add_no_flops(torchscan):
    """The same fork doing only zero-cost work (a transpose view and the copy
    that makes it contiguous): those calls are still not seen, but they add
    no FLOPs or MACs by the conventions, so the FLOPs stay complete and say
    why; only the module view's memory accesses become partial."""

    @torch.jit.script
    def work(a):
        return a.t().contiguous()

    @torch.jit.script
    def run(a, b):
        fut = torch.jit.fork(work, a)
        c = torch.mm(a, b)
        return torch.jit.wait(fut), c

    a, b = torch.ones(20, 30), torch.ones(30, 40)
    run(a, b)
    s = torchscan.scan()
    with s:
        run(a, b)
    report = s.report()
    assert report["by_operator"]["aten.mm"] == 48000  # 20*40 outputs x 30 terms x 2
    assert report["total"]["status"] == "complete", report["diagnostics"]
    codes = [d["code"] for d in report["diagnostics"]]
    assert codes == ["unattributed_zero_cost_work"], codes
    module = s.module_report()
    assert module["totals"]["module_flops"]["status"] == "complete", module["diagnostics"]
    assert module["totals"]["macs"]["status"] == "complete"
    assert module["totals"]["dmas"]["status"] == "partial"
    assert [(d["code"], d["metric"]) for d in module["diagnostics"]] == [("unattributed_thread_work", "dmas")]


def test_module_scopes_from_python_hooks(torchscan):
    """The scope surface crawl_module builds on: hooks push/pop (path, call)."""
    torch.manual_seed(0)
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    x = torch.randn(2, 4)
    scan = torchscan.scan()
    open_scopes = []
    names = {m: n or "model" for n, m in model.named_modules()}

    def pre(module, args):
        open_scopes.append(scan._session.push_module_scope(names[module]))

    def post(module, args, output):
        scan._session.pop_module_scope(open_scopes.pop(), False, [])

    handles = [m.register_forward_pre_hook(pre) for m in model.modules()]
    handles += [m.register_forward_hook(post, always_call=True) for m in model.modules()]
    try:
        with scan, torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    layers = json.loads(scan._session.layers())
    assert [(l["path"], l["call_index"], l["depth"]) for l in layers] == [
        ("model", 0, 0), ("0", 0, 1), ("1", 0, 1), ("0", 1, 1)]
    # Each Linear call: (2x4)(4x4): 8 dots of 4 terms -> 64 (operator view, bias
    # omitted) and 8*7 + 8 = 64 (module view: K mults + K-1 adds + bias).
    for l in (layers[1], layers[3]):
        assert l["metrics"]["operator_flops"]["value"] == 64
        assert l["metrics"]["module_flops"]["value"] == 64
    assert layers[2]["metrics"]["operator_flops"]["value"] == 8  # relu
    assert layers[0]["metrics"]["operator_flops"]["value"] == 0  # Sequential does nothing itself
