"""Scans skip the inside of calls that own their subtree (Note [Owned
children] in torchscan_dispatch/core/op_catalog.cc): every report of every zoo workload, in
every way the Python API produces one, and the reports of random calls of
the composites models use, are the same as when every call is recorded.
Only the number of calls recorded differs, and it must: the tests also
check that the lean scans recorded fewer calls, so they cannot pass with
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


def _random_calls(rng):
    """(name, call) for functional calls that own inner calls, with
    arguments drawn from `rng`: dtypes (floating, integer, complex), shapes,
    strides (a transposed copy), options (bias or none, groups, padding,
    masks, reductions), and operands that require grad."""
    import torch
    import torch.nn.functional as F

    def t(*shape, dtype=torch.float32, grad=False):
        if dtype.is_floating_point or dtype.is_complex:
            x = torch.randn(*shape, dtype=dtype)
        else:
            x = torch.randint(0, 6, shape, dtype=dtype)
        if x.dim() >= 2 and rng.random() < 0.3:  # the same values, another layout
            x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
        return x.requires_grad_(grad) if grad else x

    dt = rng.choice([torch.float32, torch.float64, torch.bfloat16])
    it = rng.choice([torch.int64, torch.int32, torch.uint8])
    b, n, d, o = (rng.randint(1, 4) for _ in range(4))
    grad = rng.random() < 0.3
    cin, groups = 2 * rng.randint(1, 2), rng.choice([1, 2])
    heads, q_len, kv_len = rng.choice([1, 2]), rng.randint(1, 5), rng.randint(1, 5)
    mask = rng.choice([None, "bool", "float"])

    def attention():
        q, k, v = (t(b, heads, q_len if i == 0 else kv_len, 8, dtype=dt, grad=grad and i == 0) for i in range(3))
        m = None if mask is None else (torch.rand(q_len, kv_len) > 0.3 if mask == "bool" else t(q_len, kv_len, dtype=dt))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=m is None and rng.random() < 0.5)

    return [
        ("linear", lambda: F.linear(t(b, n, d, dtype=dt, grad=grad), t(o, d, dtype=dt),
                                    t(o, dtype=dt) if rng.random() < 0.5 else None)),
        ("linear of a vector", lambda: F.linear(t(d, dtype=dt), t(o, d, dtype=dt))),
        ("integer linear", lambda: F.linear(t(n, d, dtype=it), t(o, d, dtype=it))),
        ("integer matmul", lambda: torch.matmul(t(b, n, d, dtype=it), t(d, o, dtype=it))),
        ("broadcast matmul", lambda: torch.matmul(t(b, 1, n, d, dtype=dt), t(3, d, o, dtype=dt))),
        ("complex mm", lambda: torch.mm(t(n, d, dtype=torch.complex64), t(d, o, dtype=torch.complex64))),
        ("bilinear", lambda: F.bilinear(t(b, d, dtype=dt), t(b, n, dtype=dt), t(o, d, n, dtype=dt))),
        ("einsum", lambda: torch.einsum("bnd,od->bno", t(b, n, d, dtype=dt), t(o, d, dtype=dt))),
        ("multi_dot", lambda: torch.linalg.multi_dot([t(n, d, dtype=dt), t(d, o, dtype=dt), t(o, 3, dtype=dt)])),
        ("addmm", lambda: torch.addmm(t(o, dtype=dt), t(n, d, dtype=dt), t(d, o, dtype=dt),
                                      beta=rng.choice([0, 1, 0.5]), alpha=2)),
        ("mm into out=", lambda: torch.mm(t(n, d, dtype=dt), t(d, o, dtype=dt), out=torch.empty(n, o, dtype=dt))),
        ("conv2d", lambda: F.conv2d(t(b, cin, 6, 5, dtype=dt, grad=grad), t(4, cin // groups, 3, 2, dtype=dt),
                                    t(4, dtype=dt), stride=rng.choice([1, 2]), dilation=rng.choice([1, 2]),
                                    groups=groups)),
        ("conv2d, padding same", lambda: F.conv2d(t(b, cin, 6, 6, dtype=dt), t(4, cin, 3, 3, dtype=dt),
                                                  padding="same")),
        ("conv_transpose2d", lambda: F.conv_transpose2d(t(b, cin, 4, 4, dtype=dt), t(cin, 3, 3, 3, dtype=dt),
                                                        stride=2, output_padding=1)),
        ("layer_norm", lambda: F.layer_norm(t(b, n, d, dtype=dt, grad=grad), (d,),
                                            t(d, dtype=dt) if rng.random() < 0.5 else None)),
        ("group_norm", lambda: F.group_norm(t(b, 4, 5, dtype=dt), 2, t(4, dtype=dt), t(4, dtype=dt))),
        ("batch_norm, training", lambda: F.batch_norm(t(2, 3, 5, dtype=dt), torch.zeros(3, dtype=dt),
                                                      torch.ones(3, dtype=dt), training=True)),
        ("rms_norm", lambda: F.rms_norm(t(b, n, d, dtype=dt), (d,), t(d, dtype=dt))),
        ("embedding with max_norm", lambda: F.embedding(torch.randint(0, 7, (b, n)), t(7, d, dtype=dt),
                                                        max_norm=1.0)),
        ("embedding_bag", lambda: F.embedding_bag(torch.randint(0, 7, (b, n)), t(7, d),
                                                  mode=rng.choice(["sum", "mean", "max"]))),
        ("scaled_dot_product_attention", attention),
        ("attention with grouped heads", lambda: F.scaled_dot_product_attention(
            t(1, 4, q_len, 8, dtype=dt), t(1, 2, kv_len, 8, dtype=dt), t(1, 2, kv_len, 8, dtype=dt),
            enable_gqa=True)),
        ("cross_entropy", lambda: F.cross_entropy(t(b, 5, grad=grad), torch.randint(0, 5, (b,)),
                                                  label_smoothing=rng.choice([0.0, 0.1]))),
        ("softmax of integers", lambda: torch.softmax(t(b, d, dtype=it), -1, dtype=torch.float32)),
        ("interpolate", lambda: F.interpolate(t(b, 2, 4, 4), scale_factor=2,
                                              mode=rng.choice(["nearest", "bilinear", "bicubic"]))),
        ("cdist", lambda: torch.cdist(t(b, n, d), t(b, 3, d))),
        ("vector_norm", lambda: torch.linalg.vector_norm(t(b, d, dtype=dt), ord=rng.choice([1, 2, 3, float("inf")]))),
        ("lstm_cell", lambda: torch.lstm_cell(t(b, d), (t(b, 3), t(b, 3)), t(12, d), t(12, 3), t(12), t(12))),
    ]


def test_random_calls_give_the_same_reports():
    """Random arguments to the composites a model calls (the zoo calls each
    one a few ways only): the lean scan's operator and module reports equal
    those of a scan that records every call, and the lean scans recorded
    fewer calls in all."""
    import random

    import torch

    from torchscan.flops import FlopScan

    def without_counts(report):
        return _strip_recorded_calls(json.loads(json.dumps(report)))[0]

    rng = random.Random(20261205)
    compared = lean_calls = full_calls = 0
    for _ in range(3):
        for name, call in _random_calls(rng):
            seed = rng.randrange(2**31)
            results, recorded = [], []
            for record_all in (False, True):
                torch.manual_seed(seed)  # the same arguments in both scans
                rng_state = rng.getstate()
                scan = FlopScan(_record_owned_children=record_all)
                with scan:
                    call()
                rng.setstate(rng_state)
                results.append((without_counts(scan.report()), without_counts(scan.module_report())))
                recorded.append(scan._session.recorded_calls())
            assert results[0] == results[1], name
            compared += 1
            lean_calls += recorded[0]
            full_calls += recorded[1]
    assert compared == 3 * len(_random_calls(random.Random(0)))
    assert 0 < lean_calls < full_calls * 0.8, (lean_calls, full_calls)
