"""torchscan_training_v1 rows of the CPU attention and LSTM backward kernels on
real ATen calls.

aten::_scaled_dot_product_flash_attention_for_cpu_backward, A = B*Hq*L*S
scores, R = B*Hq*L rows (formulas/attention.cc SdpaCpuBackward):
    five native products 2A(3d + 2dv) (torch's sdpa_backward_flop_count)
    + 2A scale (recomputed scores, gradient through the scale)
    + A per mask (causal, explicit) + 2A exp(s - logsumexp)
    + R(2dv - 1) rowsum(grad_out * out) + 2A softmax backward attn*(gattn - dsum)
aten::mkldnn_rnn_layer_backward, per layer and direction, N = T*B, G = 4, H
hidden, I input width (formulas/recurrent.cc MkldnnRnnLayerBackward):
    29NH cell backward + 4NGH(I + H) products + GH(N - 1) bias gradient
    + GH for b_ih + b_hh when the layer has biases.

Neither kernel has an entry in torch._decomp.decomposition_table; instead each
is compared with its own math written in ATen operators (the reference
computes the same gradients as the kernel, checked numerically, and counts the
same under TorchScan's existing rows).
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import sdpa_backward_flop_count

SDPA_BWD = "aten._scaled_dot_product_flash_attention_for_cpu_backward"
SDPA_FWD = "aten._scaled_dot_product_flash_attention_for_cpu"
LSTM_BWD = "aten.mkldnn_rnn_layer_backward"


def sdpa_backward_count(b, hq, l, s, d, masks):
    """The row's closed form (d = dv, as the CPU kernel requires)."""
    a, r = b * hq * l * s, b * hq * l
    return 2 * a * (3 * d + 2 * d) + 2 * a + masks * a + 2 * a + r * (2 * d - 1) + 2 * a


def lstm_layer_backward_count(t, b, i, h, biases=True):
    n, gh = t * b, 4 * h
    return 29 * n * h + 4 * n * gh * (i + h) + gh * (n - 1) + (gh if biases else 0)


def _backward_only(torchscan, loss):
    return torchscan.measure_flops(lambda: loss.backward())


# ------------------------------------------------------------------ attention


def test_sdpa_backward_by_hand(torchscan):
    torch.manual_seed(0)
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    k = torch.randn(1, 2, 5, 4, requires_grad=True)
    v = torch.randn(1, 2, 5, 4, requires_grad=True)
    out = F.scaled_dot_product_attention(q, k, v)
    grad = torch.randn_like(out)
    r = torchscan.measure_flops(lambda: out.backward(grad))
    # A = 1*2*3*5 = 30 scores, R = 6 rows, d = dv = 4.
    # Products per head: 5 products of 3*5*4 = 60 terms each = 300 terms, 2
    # FLOPs per term: 600; 2 heads: 1200. Per score 1 + 2 + 2 + 1 = 6: 180.
    # Per row 4 multiplies + 3 adds: 42. 1200 + 180 + 42 = 1422.
    assert r["by_operator"] == {SDPA_BWD: 1422}
    assert r["total"]["status"] == "complete"
    # The product part is torch's own count of the SDPA backward.
    assert sdpa_backward_flop_count((1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)) == 1200


@pytest.mark.parametrize("causal,mask", [(True, None), (False, "float"), (False, "bool")])
def test_sdpa_backward_masks(torchscan, causal, mask):
    torch.manual_seed(0)
    b, h, l, s, d = 2, 2, 4, 6, 8
    q = torch.randn(b, h, l, d, requires_grad=True)
    k = torch.randn(b, h, s, d, requires_grad=True)
    v = torch.randn(b, h, s, d, requires_grad=True)
    attn_mask = None
    if mask == "float":
        attn_mask = torch.randn(l, s)
    elif mask == "bool":
        attn_mask = torch.rand(b, 1, l, s) > 0.3
        attn_mask[..., 0] = True  # no fully masked row
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal)
    r = _backward_only(torchscan, out.sum())
    # A = 2*2*4*6 = 96, R = 16: products 2*96*(24 + 16) = 7680, per score 6*96 = 576,
    # one mask 96, rows 16*15 = 240: 8592.
    assert r["by_operator"][SDPA_BWD] == 8592 == sdpa_backward_count(b, h, l, s, d, 1)
    assert r["total"]["status"] == "complete", r["diagnostics"]


def test_sdpa_backward_relates_to_forward_and_flop_counter(torchscan):
    torch.manual_seed(0)
    b, h, l, s, d = 1, 3, 5, 7, 4
    q = torch.randn(b, h, l, d, requires_grad=True)
    k = torch.randn(b, h, s, d, requires_grad=True)
    v = torch.randn(b, h, s, d, requires_grad=True)
    holder = {}
    fwd = torchscan.measure_flops(lambda: holder.setdefault("o", F.scaled_dot_product_attention(q, k, v)))
    bwd = _backward_only(torchscan, holder["o"].sum())
    a, rows = b * h * l * s, b * h * l
    products = sdpa_backward_flop_count((b, h, l, d), (b, h, l, d), (b, h, s, d), (b, h, s, d))
    # Forward: 2 products 4Ad, scale A, softmax 5A - 2R.
    assert fwd["by_operator"][SDPA_FWD] == 4 * a * d + a + 5 * a - 2 * rows
    # Backward: FlopCounterMode's SDPA-backward products (10Ad, 2.5x the forward's)
    # plus 6A per-score work and R(2d - 1) for the row sums.
    assert products == 10 * a * d
    assert bwd["by_operator"][SDPA_BWD] - products == 6 * a + rows * (2 * d - 1)


def _sdpa_reference_backward(grad, q, k, v, out, lse, scale, causal_mask, mask):
    """cpu_flash_attention_backward's math in ATen operators, GQA by grouping
    the query heads of one KV head into the contraction of the K/V gradients."""
    b, hq, l, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    g = hq // hkv
    kx = k[:, :, None].expand(b, hkv, g, s, d).reshape(b, hq, s, d)
    vx = v[:, :, None].expand(b, hkv, g, s, d).reshape(b, hq, s, d)
    attn = (q @ kx.transpose(-1, -2)) * scale                   # products, scale
    if mask is not None:
        attn = attn + mask                                      # explicit mask
    attn = torch.exp(attn - lse[..., None])                     # softmax from logsumexp
    if causal_mask is not None:
        attn = attn.masked_fill(causal_mask, 0.0)               # causal: keys after the query
    dsum = (grad * out).sum(-1, keepdim=True)                   # rowsum(grad_out * out)
    gattn = grad @ vx.transpose(-1, -2)
    gattn = attn * (gattn - dsum)                               # softmax backward
    gattn = gattn * scale                                       # back through the scale
    gq = gattn @ kx
    grouped = gattn.reshape(b, hkv, g * l, s).transpose(-1, -2)
    gk = grouped @ q.reshape(b, hkv, g * l, d)
    gv = attn.reshape(b, hkv, g * l, s).transpose(-1, -2) @ grad.reshape(b, hkv, g * l, d)
    return gq, gk, gv


@pytest.mark.parametrize("hq,hkv,causal,masked", [(2, 2, False, False), (2, 2, True, False),
                                                   (2, 2, False, True), (4, 2, False, False),
                                                   (4, 1, True, False)])
def test_sdpa_backward_equals_its_aten_reference(torchscan, hq, hkv, causal, masked):
    torch.manual_seed(0)
    b, l, s, d, scale = 2, 4, 6, 8, 0.3
    q, k, v = torch.randn(b, hq, l, d), torch.randn(b, hkv, s, d), torch.randn(b, hkv, s, d)
    mask = torch.randn(l, s) if masked else None
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, causal, attn_mask=mask, scale=scale)
    grad = torch.randn_like(out)
    kernel = lambda: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(  # noqa: E731
        grad, q, k, v, out, lse, 0.0, causal, attn_mask=mask, scale=scale)
    causal_mask = torch.ones(l, s, dtype=torch.bool).triu(1) if causal else None
    reference = lambda: _sdpa_reference_backward(grad, q, k, v, out, lse, scale, causal_mask, mask)  # noqa: E731
    for got, want in zip(kernel(), reference()):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    counted = torchscan.measure_flops(kernel)
    ref = torchscan.measure_flops(reference)
    assert counted["total"]["status"] == ref["total"]["status"] == "complete", ref["diagnostics"]
    assert counted["total"]["value"] == ref["total"]["value"]
    masks = int(causal) + int(masked)
    assert counted["by_operator"] == {SDPA_BWD: sdpa_backward_count(b, hq, l, s, d, masks)}


def test_sdpa_backward_dropout_is_unavailable(torchscan):
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)
    r = torchscan.measure_flops(lambda: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        torch.ones_like(out), q, k, v, out, lse, 0.5, False))
    # The call is not counted: the workload total is a lower bound (nothing known).
    assert r["total"]["status"] == "partial" and r["total"]["known_value"] == 0
    assert SDPA_BWD not in r["by_operator"]
    assert [(d["code"], d["operator"]) for d in r["diagnostics"]] == [("unsupported_attention_dropout", SDPA_BWD)]


# ------------------------------------------------------------------ recurrent


@pytest.mark.parametrize("layers,batch_first,bidirectional", [(1, False, False), (2, True, False),
                                                              (1, True, True), (2, False, True)])
def test_lstm_backward_kernel_per_layer_and_direction(torchscan, layers, batch_first, bidirectional):
    torch.manual_seed(0)
    t, b, i, h = 5, 3, 4, 6
    m = nn.LSTM(i, h, num_layers=layers, batch_first=batch_first, bidirectional=bidirectional)
    x = torch.randn((b, t, i) if batch_first else (t, b, i))
    y, _ = m(x)
    r = _backward_only(torchscan, y.sum())
    dirs = 2 if bidirectional else 1
    expected = dirs * lstm_layer_backward_count(t, b, i, h)
    expected += (layers - 1) * dirs * lstm_layer_backward_count(t, b, dirs * h, h)
    assert r["by_operator"][LSTM_BWD] == expected
    assert r["total"]["status"] == "complete", r["diagnostics"]


def test_lstm_backward_by_hand(torchscan):
    torch.manual_seed(0)
    m = nn.LSTM(2, 3)
    y, _ = m(torch.randn(2, 3, 2))
    r = _backward_only(torchscan, y.sum())
    # T = 2, B = 3 (N = 6), I = 2, H = 3, 12 gate units.
    # Cell: 29 per (step, row, unit): 29*6*3 = 522.
    # dx, dW_ih: 6*12*2 terms each -> 2*144*2 = 576; dh, dW_hh: 6*12*3 each -> 2*216*2 = 864.
    # Bias gradient 12 sums of 6: 60; b_ih + b_hh 12. 522 + 576 + 864 + 60 + 12 = 2034.
    # (The loss's sum ran before the measurement; its backward is a free expand.)
    assert r["by_operator"] == {LSTM_BWD: 2034}
    # Without biases: no b_ih + b_hh: 2022.
    m = nn.LSTM(2, 3, bias=False)
    y, _ = m(torch.randn(2, 3, 2))
    assert _backward_only(torchscan, y.sum())["by_operator"][LSTM_BWD] == 2022


def _lstm_reference(m, x, h0, c0, dy):
    """Forward states (not measured) and oneDNN's LSTM backward in ATen operators."""
    w_ih, w_hh, b_ih, b_hh = m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0, m.bias_hh_l0
    t_steps = x.shape[0]
    with torch.no_grad():
        hs, cs, gates = [h0], [c0], []
        for t in range(t_steps):
            ig, fg, gg, og = (x[t] @ w_ih.t() + b_ih + hs[-1] @ w_hh.t() + b_hh).chunk(4, 1)
            ig, fg, gg, og = ig.sigmoid(), fg.sigmoid(), gg.tanh(), og.sigmoid()
            cs.append(fg * cs[-1] + ig * gg)
            hs.append(og * cs[-1].tanh())
            gates.append((ig, fg, gg, og))

    def backward():
        with torch.no_grad():
            _bias = b_ih + b_hh  # the kernel combines the biases before oneDNN runs
            dh_next, dc_next = torch.zeros_like(h0), torch.zeros_like(c0)
            dgates = [None] * t_steps
            for t in reversed(range(t_steps)):
                ig, fg, gg, og = gates[t]
                tc = torch.tanh(cs[t + 1])
                dh = dy[t] + dh_next
                dc = dc_next + (1 - tc * tc) * og * dh
                do = (og - og * og) * dh * tc
                di = (ig - ig * ig) * dc * gg
                df = (fg - fg * fg) * dc * cs[t]
                dg = (1 - gg * gg) * (ig * dc)
                dc_next = dc * fg
                dgates[t] = torch.cat([di, df, dg, do], 1)
                dh_next = dgates[t] @ w_hh
            d = torch.stack(dgates).reshape(-1, w_ih.shape[0])
            dx = (d @ w_ih).reshape(x.shape)
            dw_ih = d.t() @ x.reshape(-1, x.shape[2])
            dw_hh = d.t() @ torch.stack(hs[:-1]).reshape(-1, h0.shape[1])
            db = d.sum(0)
            return dx, dw_ih, dw_hh, db, dh_next, dc_next

    return backward


def test_lstm_backward_equals_its_aten_reference(torchscan):
    torch.manual_seed(0)
    t, b, i, h = 4, 3, 5, 6
    m = nn.LSTM(i, h)
    x = torch.randn(t, b, i, requires_grad=True)
    h0 = torch.randn(1, b, h, requires_grad=True)
    c0 = torch.randn(1, b, h, requires_grad=True)
    dy = torch.randn(t, b, h)
    y, _ = m(x, (h0, c0))
    kernel = torchscan.measure_flops(lambda: y.backward(dy))
    reference = _lstm_reference(m, x.detach(), h0[0].detach(), c0[0].detach(), dy)
    dx, dw_ih, dw_hh, db, dh0, dc0 = reference()
    close = dict(atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(x.grad, dx, **close)
    torch.testing.assert_close(m.weight_ih_l0.grad, dw_ih, **close)
    torch.testing.assert_close(m.weight_hh_l0.grad, dw_hh, **close)
    torch.testing.assert_close(m.bias_ih_l0.grad, db, **close)
    torch.testing.assert_close(m.bias_hh_l0.grad, db, **close)
    torch.testing.assert_close(h0.grad[0], dh0, **close)
    torch.testing.assert_close(c0.grad[0], dc0, **close)
    ref = torchscan.measure_flops(reference)
    assert ref["total"]["status"] == "complete", ref["diagnostics"]
    assert kernel["by_operator"][LSTM_BWD] == ref["total"]["value"] == lstm_layer_backward_count(t, b, i, h)


def test_gru_training_runs_only_counted_operators(torchscan):
    # GRU has no oneDNN path in torch: its training step decomposes into
    # addmm/mm, pointwise ops and sigmoid/tanh backward, all of them counted.
    torch.manual_seed(0)
    m = nn.GRU(4, 6, num_layers=2, batch_first=True, bidirectional=True)
    x = torch.randn(2, 5, 4)

    def step():
        y, hn = m(x)
        (y.sum() + hn.sum()).backward()

    r = torchscan.measure_flops(step)
    assert r["total"]["status"] == "complete", r["diagnostics"]
    assert not [d for d in r["diagnostics"] if d["code"] in ("uncounted_operator", "excluded_operator")]
    assert not any("rnn" in op for op in r["by_operator"])
    assert {"aten.sigmoid_backward", "aten.tanh_backward", "aten.mm"} <= set(r["by_operator"])
