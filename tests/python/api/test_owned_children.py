"""Scans skip the inside of calls that own their subtree (Note [Owned
children] in torchscan_dispatch/core/op_catalog.cc): every report of every zoo workload, in
every way the Python API produces one, is the same as when every call is
recorded. Only the number of calls recorded differs, and it must: the test
also checks that the lean scans recorded fewer calls, so it cannot pass with
the skipping switched off."""

import json
import os

import pytest

import torchscan
import torchscan.flops
from tools import zoo_reports


def _strip_recorded_calls(value):
    """The value without the per-thread count of recorded calls, summed apart."""
    total = 0
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "threads" and isinstance(v, list):
                kept = []
                for t in v:
                    if isinstance(t, dict) and isinstance(t.get("calls"), int):
                        total += t["calls"]
                        t = {kk: vv for kk, vv in t.items() if kk != "calls"}
                    inner, n = _strip_recorded_calls(t)
                    kept.append(inner)
                    total += n
                out[k] = kept
            else:
                out[k], n = _strip_recorded_calls(v)
                total += n
        return out, total
    if isinstance(value, list):
        out_list = []
        for v in value:
            inner, n = _strip_recorded_calls(v)
            out_list.append(inner)
            total += n
        return out_list, total
    return value, 0


def _load(folder):
    reports = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            reports[name] = json.load(f)
    return reports


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    lean = str(tmp_path_factory.mktemp("lean"))
    full = str(tmp_path_factory.mktemp("full"))
    zoo_reports.write(lean, [])
    original = torchscan.flops.FlopScan.__init__

    def record_everything(self, *args, **kwargs):
        kwargs["_record_owned_children"] = True
        original(self, *args, **kwargs)

    torchscan.flops.FlopScan.__init__ = record_everything
    try:
        zoo_reports.write(full, [])
    finally:
        torchscan.flops.FlopScan.__init__ = original
    return _load(lean), _load(full)


def test_every_report_is_the_same(both):
    lean, full = both
    assert sorted(lean) == sorted(full) and len(lean) > 100
    lean_calls = full_calls = 0
    for name in sorted(full):
        a, n_lean = _strip_recorded_calls(lean[name])
        b, n_full = _strip_recorded_calls(full[name])
        lean_calls += n_lean
        full_calls += n_full
        if a != b:
            # The first differences, by path, so a failure says what differed.
            diffs: list = []
            zoo_reports._differences(a, b, name, diffs, 10)
            pytest.fail("lean (A) and full (B) scans differ:\n" + "\n".join(diffs))
    # The zoo's models are made of composites (linear, conv2d, batch_norm,
    # layer_norm ...): the lean scans recorded far fewer calls.
    assert 0 < lean_calls < full_calls * 0.8, (lean_calls, full_calls)


def test_trace_and_memory_scans_record_every_call():
    import torch
    import torch.nn.functional as F

    x, w = torch.randn(4, 8), torch.randn(3, 8)
    counts = {}
    for options in ({}, {"trace": True}, {"memory": True}):
        with torchscan.scan(**options) as s:
            F.linear(x, w)
        counts[tuple(options)] = s._session.recorded_calls()
    # F.linear without bias is aten::linear over aten::t (over transpose, over
    # as_strided) and aten::matmul (over mm, over resolve_conj twice): 8
    # calls. t and mm own their subtrees (a view; a product whose formula
    # covers its kernel), and no operand needs autograd work (nothing requires
    # grad; the transposed weight's autograd metadata only tracks its base),
    # so a plain scan skips transpose, as_strided and both resolve_conj:
    # linear, t, matmul and mm. The trace and the memory view show all 8.
    assert counts[()] == 4
    assert counts[("trace",)] == 8 and counts[("memory",)] == 8


def test_autograd_work_keeps_the_calls_it_makes():
    import torch
    import torch.autograd.forward_ad as fwAD
    import torch.nn.functional as F

    x, w = torch.randn(4, 8), torch.randn(3, 8, requires_grad=True)
    # Under no_grad the weight's requires_grad records nothing: the same 4
    # calls as a weight that does not require grad.
    with torch.no_grad(), torchscan.scan() as s:
        F.linear(x, w)
    assert s._session.recorded_calls() == 4
    # With grad mode on it needs its gradient recorded: more calls are kept.
    with torchscan.scan() as s:
        F.linear(x, w)
    assert s._session.recorded_calls() > 4

    # Forward mode: the autograd kernels compute the tangents' products, work
    # beyond the primal mm (2*4*8*3 = 192 FLOPs) that FlopCounterMode counts
    # too. Nothing requires grad here: only the tangent makes it live.
    # TorchScan also counts the tangents' elementwise adds (torchscan_flops_v1),
    # which FlopCounterMode has no formula for: the products are compared.
    w0, tangent = w.detach(), torch.randn(4, 8)

    def dual_linear():
        with fwAD.dual_level():
            F.linear(fwAD.make_dual(x, tangent), w0)

    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        dual_linear()
    expected = counter.get_flop_counts()["Global"][torch.ops.aten.mm]
    assert expected > 192
    with torchscan.scan() as s:
        dual_linear()
    report = s.report()
    # Complete: the forward-AD bookkeeping (aten::_has_same_storage_numel) is a
    # metadata query, not uncounted work.
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["by_operator"]["aten.mm"] == expected
