"""Streaming scans (scan(streaming=True), ScanOptions::streaming): calls are
folded into the reports' sums whenever nothing is open and then dropped.
The reports must equal those of the same scan holding every call, on every
zoo workload, with module scopes (layer rows and receptive fields), module
labels (by_module) and several folds per workload; memory must not grow
with the calls."""
import contextlib

import pytest
import torch
import torch.nn as nn

from torchscan.flops import FlopScan
from tests.fixtures.zoo import workloads

_ZOO = workloads()


class _Scopes:
    """Module scopes the way crawl_module opens them (a scope per module call,
    closed with its output tensors' identities), in every given session."""

    def __init__(self, sessions):
        self._sessions = sessions
        self._open = []

    def __enter__(self):
        def pre(mod, args):
            self._open.append([s.push_module_scope(type(mod).__name__) for s in self._sessions])

        def post(mod, args, out):
            flat = out if isinstance(out, (tuple, list)) else (out,)
            ids = [t._cdata for t in flat if isinstance(t, torch.Tensor)]
            for s, scope in zip(self._sessions, self._open.pop()):
                s.pop_module_scope(scope, False, ids)

        self._hooks = [nn.modules.module.register_module_forward_pre_hook(pre),
                       nn.modules.module.register_module_forward_hook(post)]
        return self

    def __exit__(self, *exc):
        for h in self._hooks:
            h.remove()
        return False


def _reports(run, modes, repeats=3):
    """One run of the workload under nested scans, one per (streaming,
    fold_every) mode, outermost first: every scan sees the same calls and
    the same tensors (receptive fields follow tensor identities, which
    differ from one run to the next)."""
    torch.manual_seed(0)
    # Module scopes are pushed below, so every scan takes them (a public
    # streaming scan does not, and refuses them: see the test at the end).
    scans = [FlopScan(modules=True, streaming=streaming, _fold_every=fold_every, _module_scopes=True)
             for streaming, fold_every in modes]
    with contextlib.ExitStack() as stack:
        for s in scans:
            stack.enter_context(s)
        with _Scopes([s._session for s in scans]):
            for _ in range(repeats):
                run()
    out = []
    for s, (streaming, _) in zip(scans, modes):
        scan = s.scan_report()
        assert scan["context"].pop("streaming") is streaming
        out.append({"flops": s.report(), "module": s.module_report(), "scan": scan,
                    "calls": s._session.recorded_calls(), "held": s._session.held_calls()})
    return out


def _first_difference(a, b, where=""):
    """Where two JSON values first differ, for the failure message."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{where}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{where}[{i}]")
    return where, a, b


@pytest.mark.parametrize("name", sorted(_ZOO))
def test_streaming_reports_equal_full_reports_on_the_zoo(name):
    run = _ZOO[name]
    run()  # warm-up: lazy initialisation (optimizer state, caches) happens outside the scans
    # A full scan around two streaming ones: folding at every moment nothing
    # is open, and once 50 calls are held.
    full, *streamed = _reports(run, [(False, 4096), (True, 1), (True, 50)])
    assert full["held"] == full["calls"] > 0
    for fold_every, st in zip((1, 50), streamed):
        for part in ("flops", "module", "scan"):
            assert st[part] == full[part], (name, fold_every, part, _first_difference(st[part], full[part]))
        assert st["calls"] == full["calls"]
        # Each repeat is a root module call: once more than fold_every calls
        # were recorded, a fold has dropped some (a small workload may record
        # fewer: the calls inside those that own their subtree are not).
        if full["calls"] > fold_every:
            assert st["held"] < full["calls"]


def _hostile_workloads():
    """Workloads whose call trees are unusual: recomputation that unwinds
    open calls (checkpoint), autocast's casts, torch.func transforms, a
    kernel that raises and is caught, and a compiled graph."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(8, 8)
    compiled = torch.compile(lambda t: (t * 2).sin() @ w)
    compiled(torch.ones(4, 8))  # compiled outside the scans

    def raising():
        try:
            torch.mm(torch.ones(2, 3), torch.ones(4, 5))
        except RuntimeError:
            pass
        torch.mm(torch.ones(2, 3), torch.ones(3, 4))

    return {
        "checkpoint": lambda: checkpoint(block, x, use_reentrant=False).sum().backward(),
        "autocast": lambda: _autocast(block, x),
        "vmap_grad": lambda: torch.func.vmap(torch.func.grad(lambda v: (v @ w).sin().sum()))(torch.randn(3, 8)),
        "raising": raising,
        "compiled": lambda: compiled(torch.ones(4, 8)),
    }


def _autocast(block, x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        block(x).float().sum().backward()


@pytest.fixture(scope="module")
def hostile():
    # Built when first used, not at collection: compiling imports Inductor,
    # which registers operators the coverage audit's baseline lacks.
    return _hostile_workloads()


@pytest.mark.parametrize("name", ["autocast", "checkpoint", "compiled", "raising", "vmap_grad"])
def test_streaming_equals_full_on_unusual_call_trees(hostile, name):
    run = hostile[name]
    run()
    full, *streamed = _reports(run, [(False, 4096), (True, 1), (True, 7)])
    for st in streamed:
        for part in ("flops", "module", "scan"):
            assert st[part] == full[part], (name, part, _first_difference(st[part], full[part]))
        assert st["held"] < full["calls"]
    if name in ("raising", "compiled"):  # the raised call and the compiled graph stay visible
        assert full["flops"]["total"]["status"] == "partial"


def test_python_requests_are_totalled_alike_in_full_and_streaming_scans():
    # mm of (2,3)@(3,4): 2*2*3*4 = 48 FLOPs per call; q1 makes one, q2 two.
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    reports = []
    for streaming in (False, True):
        with FlopScan(streaming=streaming, _fold_every=1) as s:
            with s.request("q1"):
                torch.mm(a, b)
            with s.request("q2"):
                torch.mm(a, b)
                torch.mm(a, b)
            torch.mm(a, b)  # outside any request
        r = s.scan_report()
        assert [(q["request"], q["totals"]["operator_flops"]["value"]) for q in r["requests"]] == [("q1", 48),
                                                                                                   ("q2", 96)]
        assert r["operator_flops"]["total"]["value"] == 4 * 48
        r["context"].pop("streaming")
        reports.append(r)
    assert reports[0] == reports[1]
    with FlopScan() as s:
        with pytest.raises(RuntimeError, match="already open"):
            with s.request("outer"):
                with s.request("inner"):
                    pass
        with pytest.raises(TypeError, match="non-empty string"):
            with s.request(""):
                pass
    with pytest.raises(RuntimeError, match="not active"):
        with s.request("late"):
            pass


def test_a_streaming_scan_without_module_scopes_refuses_them_and_reports_alike():
    """scan(streaming=True) takes no module scopes (ScanOptions::module_scopes),
    so its folds skip the receptive-field flow; pushing one is refused with
    the reason, and its reports equal a full scan's."""
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    reports = []
    for streaming in (False, True):
        with FlopScan(streaming=streaming, _fold_every=1) as s:
            for _ in range(3):
                torch.relu(torch.mm(a, b))
            if streaming:
                with pytest.raises(RuntimeError, match="without module scopes"):
                    s._session.push_module_scope("layer")
        r = s.scan_report()
        r["context"].pop("streaming")
        reports.append(r)
    assert reports[0] == reports[1]
    assert reports[1]["operator_flops"]["total"]["value"] == 3 * 48 + 3 * 8  # mm: 2*2*3*4; relu: one per element
