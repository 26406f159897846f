"""torchscan_training_v1 normalization backward rows on real ATen calls.

Each expected count is written from the row's derivation
(formulas/normalization_backward.h); the autograd tests run the modules'
real backward (nn.LayerNorm / nn.GroupNorm / nn.BatchNorm*d in train and
eval, without affine parameters, and with requires_grad off on the input or
the parameters, which changes the output mask autograd passes). Where
torch._decomp has a decomposition of a kernel, the decomposition is counted
too: its count is derived here from the decomposition's own operations
(torch/_decomp/decompositions.py) and the difference to the kernel's count is
asserted and explained (formulas/TRAINING.md states it per row).
"""

import pytest
import torch
from torch import nn
from torch._decomp import decomposition_table

from conftest import TORCH_RELEASE

aten = torch.ops.aten


def _measure(torchscan, fn):
    r = torchscan.measure_flops(fn)
    assert r["total"]["status"] == "complete", r["diagnostics"]
    return r


def _op_count(torchscan, fn, op):
    r = _measure(torchscan, fn)
    assert op in r["by_operator"], r["by_operator"]
    return r["by_operator"][op]


def _total(torchscan, fn):
    return _measure(torchscan, fn)["total"]["value"]


def _backward(torchscan, module, x, op):
    y = module(x)
    g = torch.ones_like(y)
    return _op_count(torchscan, lambda: y.backward(g), op)


# ---------------------------------------------------------------- LayerNorm
# Kernel (layer_norm_backward_frame), N elements, D = prod(normalized_shape),
# R = N / D, W = weight present:
#   grad_input (7 + 3W)N + 9R; grad_weight 4N - D + 2R; grad_bias N - D.


def layer_norm_kernel(n, d, w, mask):
    r = n // d
    return (mask[0] * ((7 + 3 * w) * n + 9 * r) + mask[1] * (4 * n - d + 2 * r)
            + mask[2] * (n - d))


def layer_norm_decomposition(n, d, w, b, mask):
    # decompositions.native_layer_norm_backward: x_hat = (x - mean) * rstd 2N,
    # grad_x_hat = g * w (W N), a = grad_x_hat * D N, b = sum N - R,
    # c1 = grad_x_hat * x_hat N, c2 = sum N - R, c3 = x_hat * c2 N,
    # inner = a - b - c3 2N -- all computed whatever the mask; then
    # d_input = (rstd / D) * inner: R + N; d_weight = sum(g * x_hat) 2N - D;
    # d_bias = sum(g) N - D.
    r = n // d
    shared = 2 * n + w * n + n + (n - r) + n + (n - r) + n + 2 * n
    return (shared + mask[0] * (n + r) + mask[1] * w * (2 * n - d)
            + mask[2] * b * (n - d))


def test_layer_norm_backward_autograd_masks(torchscan):
    op = "aten.native_layer_norm_backward"
    # (4, 5, 8) over [8]: N = 160, D = 8, R = 20.
    x = torch.randn(4, 5, 8)
    ln = nn.LayerNorm(8)
    # Everything requires grad: 10N + 9R = 1780, 4N - D + 2R = 672, N - D = 152.
    assert _backward(torchscan, ln, x.clone().requires_grad_(), op) == 1780 + 672 + 152
    assert layer_norm_kernel(160, 8, 1, [1, 1, 1]) == 2604
    # Input without grad: mask [False, True, True] -> 672 + 152.
    assert _backward(torchscan, ln, x, op) == 824
    # Frozen parameters: mask [True, False, False] -> 1780.
    ln.requires_grad_(False)
    assert _backward(torchscan, ln, x.clone().requires_grad_(), op) == 1780
    # elementwise_affine=False: 7N + 9R = 1120 + 180 = 1300.
    plain = nn.LayerNorm(8, elementwise_affine=False)
    assert _backward(torchscan, plain, x.clone().requires_grad_(), op) == 1300
    # Over two trailing dims [5, 8]: D = 40, R = 4: 1600 + 36 + 640 - 40 + 8 + 160 - 40.
    two = nn.LayerNorm([5, 8])
    assert _backward(torchscan, two, x.clone().requires_grad_(), op) == layer_norm_kernel(160, 40, 1, [1, 1, 1])
    assert layer_norm_kernel(160, 40, 1, [1, 1, 1]) == 1636 + 608 + 120


@pytest.mark.parametrize("mask", [[True, True, True], [False, True, True], [True, False, False]])
def test_layer_norm_backward_decomposition(torchscan, mask):
    x, g = torch.randn(4, 5, 8), torch.randn(4, 5, 8)
    w, b = torch.randn(8), torch.randn(8)
    _, mean, rstd = aten.native_layer_norm(x, [8], w, b, 1e-5)
    args = (g, x, [8], mean, rstd, w, b, mask)
    kernel = _op_count(torchscan, lambda: aten.native_layer_norm_backward(*args),
                       "aten.native_layer_norm_backward")
    decomp = _total(torchscan, lambda: decomposition_table[aten.native_layer_norm_backward.default](*args))
    m = [int(v) for v in mask]
    assert kernel == layer_norm_kernel(160, 8, 1, m)
    assert decomp == layer_norm_decomposition(160, 8, 1, 1, m)
    # Every output: the kernel recomputes x_hat for grad_weight (2N + 2R) and
    # forms dx as a*dy*w + b*x + c with 11 row coefficients, the
    # decomposition reuses x_hat: kernel - decomposition = N + 12R = 400.
    if mask == [True, True, True]:
        assert kernel - decomp == 160 + 12 * 20


# ---------------------------------------------------------------- GroupNorm
# Kernel (GroupNormBackwardKernelImplInternal): B batch, C channels, G
# groups, P = B*C planes, R = B*G rows, N elements:
#   ds 2N - P (grad_input, grad_weight), db N - P (any output),
#   grad_input 4N + (2 + 3W)P + 9R, grad_weight 4P - C, grad_bias P - C.


def group_norm_kernel(n, p, r, c, w, mask):
    count = (mask[0] or mask[1]) * (2 * n - p) + (n - p)
    return count + mask[0] * (4 * n + (2 + 3 * w) * p + 9 * r) + mask[1] * (4 * p - c) + mask[2] * (p - c)


def test_group_norm_backward_autograd_masks(torchscan):
    op = "aten.native_group_norm_backward"
    # (3, 6, 4, 4), 3 groups: N = 288, C = 6, P = 18, R = 9.
    x = torch.randn(3, 6, 4, 4)
    gn = nn.GroupNorm(3, 6)
    # ds 576 - 18 = 558, db 270, grad_input 1152 + 90 + 81 = 1323,
    # grad_weight 72 - 6 = 66, grad_bias 12 -> 2229.
    assert _backward(torchscan, gn, x.clone().requires_grad_(), op) == 558 + 270 + 1323 + 66 + 12
    assert group_norm_kernel(288, 18, 9, 6, 1, [1, 1, 1]) == 2229
    # Input without grad: 558 + 270 + 66 + 12 = 906.
    assert _backward(torchscan, gn, x, op) == 906
    # affine=False: ds, db and grad_input 1152 + 36 + 81 -> 558 + 270 + 1269 = 2097.
    plain = nn.GroupNorm(3, 6, affine=False)
    assert _backward(torchscan, plain, x.clone().requires_grad_(), op) == 2097


@pytest.mark.parametrize("weight,mask", [(True, [True, True, True]), (True, [False, True, True]),
                                         (True, [True, False, False]), (True, [False, False, True]),
                                         (False, [True, False, False])])
def test_group_norm_backward_decomposition(torchscan, weight, mask):
    x, g = torch.randn(3, 6, 4, 4), torch.randn(3, 6, 4, 4)
    w = torch.randn(6) if weight else None
    _, mean, rstd = aten.native_group_norm(x, w, None, 3, 6, 16, 3, 1e-5)
    args = (g, x, mean, rstd, w, 3, 6, 16, 3, mask)
    kernel = _op_count(torchscan, lambda: aten.native_group_norm_backward(*args), "aten.native_group_norm_backward")
    decomp = _total(torchscan, lambda: decomposition_table[aten.native_group_norm_backward.default](*args))
    m = [int(v) for v in mask]
    assert kernel == group_norm_kernel(288, 18, 9, 6, int(weight), m)
    # decompositions.native_group_norm_backward computes the kernel's terms
    # one for one, except that it always computes ds (2N - P), and without a
    # weight it multiplies rstd by a tensor of ones (P) where the kernel's
    # implicit weight 1 is not counted.
    expected_difference = 0
    if not (mask[0] or mask[1]):
        expected_difference += 2 * 288 - 18
    if not weight and mask[0]:
        expected_difference += 18
    # From torch 2.14 on it computes grad_input's c2 = (db mean - ds) rstd^3 s
    # as addcmul(-ds, db, mean): the same mul and add, and a negation of ds
    # (N G = 9 values).
    if mask[0] and TORCH_RELEASE >= (2, 14):
        expected_difference += 9
    assert decomp - kernel == expected_difference


# ---------------------------------------------------------------- BatchNorm
# Kernel (batch_norm_cpu_backward_contiguous_impl), N elements, C channels:
#   eval invstd 2C (eps add, reciprocal sqrt; grad_input, grad_weight); sum N - C (grad_bias, train
#   grad_input); dotp 3N - C (grad_weight, train grad_input); grad_input
#   train (5 + W)N + 4C, eval (1 + W)N; grad_weight C.


def batch_norm_kernel(n, c, train, w, mask):
    gi, gw, gb = mask
    count = (not train and (gi or gw)) * 2 * c
    count += (gb or (train and gi)) * (n - c)
    count += (gw or (train and gi)) * (3 * n - c)
    count += gi * (((5 + w) * n + 4 * c) if train else (1 + w) * n)
    return count + gw * c


def batch_norm_decomposition(n, c, train, mask):
    # decompositions.native_batch_norm_backward: eval invstd = rsqrt(var + eps)
    # 2C; sum(g) N - C; dot_p = sum(g * (x - mean)) 3N - C; grad_mean C;
    # proj_scale = (dot_p * norm) * (invstd * invstd) 3C; grad_scale = invstd * w
    # (or * 1.0) C; grad_input train (x - mean) * proj_scale 2N and
    # ((g - proj) - grad_mean) * grad_scale 3N, eval g * grad_scale N -- all
    # whatever the mask; grad_weight dot_p * invstd C.
    count = (0 if train else 2 * c) + (n - c) + (3 * n - c) + c + 3 * c + c
    return count + (5 * n if train else n) + mask[1] * c


def test_batch_norm_backward_autograd_train_eval_masks(torchscan):
    op = "aten.native_batch_norm_backward"
    # (4, 3, 5, 5): N = 300, C = 3.
    x = torch.randn(4, 3, 5, 5)
    bn = nn.BatchNorm2d(3)
    # Train, everything: 10N + 3C = 3009.
    assert _backward(torchscan, bn, x.clone().requires_grad_(), op) == 3009
    # Train, input without grad: sum 297 + dotp 897 + grad_weight 3 = 1197.
    assert _backward(torchscan, bn, x, op) == 1197
    # Eval, everything: 6N + C = 1803.
    bn.eval()
    assert _backward(torchscan, bn, x.clone().requires_grad_(), op) == 1803
    # Eval, input without grad: invstd 6 + 297 + 897 + 3 = 1203.
    assert _backward(torchscan, bn, x, op) == 1203
    # Eval, frozen parameters: invstd 6 + dy*invstd*w 2N = 606 (no channel sums).
    bn.requires_grad_(False)
    assert _backward(torchscan, bn, x.clone().requires_grad_(), op) == 606
    # Train, affine=False: sum 297 + dotp 897 + 5N + 4C = 1500 + 12 -> 2706.
    plain = nn.BatchNorm2d(3, affine=False)
    assert _backward(torchscan, plain, x.clone().requires_grad_(), op) == 2706
    assert batch_norm_kernel(300, 3, True, 0, [1, 0, 0]) == 2706
    # BatchNorm1d on (8, 6) runs the channels-last (NC11) CPU path; the count
    # is the same per-channel formulation: 10 * 48 + 3 * 6 = 498.
    bn1 = nn.BatchNorm1d(6)
    assert _backward(torchscan, bn1, torch.randn(8, 6, requires_grad=True), op) == 498


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("mask", [[True, True, True], [False, True, True], [True, False, False]])
def test_batch_norm_backward_decomposition(torchscan, train, mask):
    x, g = torch.randn(4, 3, 5, 5), torch.randn(4, 3, 5, 5)
    w, rm, rv = torch.randn(3), torch.randn(3), torch.rand(3) + 0.5
    _, sm, si = aten.native_batch_norm(x, w, None, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    args = (g, x, w, rm, rv, sm if train else None, si if train else None, train, 1e-5, mask)
    kernel = _op_count(torchscan, lambda: aten.native_batch_norm_backward(*args), "aten.native_batch_norm_backward")
    decomp = _total(torchscan, lambda: decomposition_table[aten.native_batch_norm_backward.default](*args))
    m = [int(v) for v in mask]
    assert kernel == batch_norm_kernel(300, 3, train, 1, m)
    assert decomp == batch_norm_decomposition(300, 3, train, m)
    if mask == [True, True, True]:
        # Train: the decomposition folds invstd * w per channel (C) where the
        # kernel multiplies per element, and scales per channel once more:
        # kernel - decomposition = N - C = 297. Eval: the same fold (N - C),
        # and the decomposition also builds the train-only grad_mean and
        # proj_scale (4C) that eval does not use: N - 5C = 285.
        assert kernel - decomp == (300 - 3 if train else 300 - 15)


def test_new_batch_norm_backward_op(torchscan):
    op = "aten.batch_norm_backward"
    x, g = torch.randn(4, 3, 5, 5, requires_grad=True), torch.randn(4, 3, 5, 5)
    w, b = torch.randn(3, requires_grad=True), torch.zeros(3, requires_grad=True)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    # _batch_norm_with_update -> batch_norm_backward(update=True): train, 3009.
    y = aten._batch_norm_with_update(x, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)[0]
    assert _op_count(torchscan, lambda: y.backward(g), op) == 3009
    # _batch_norm_no_update -> batch_norm_backward(update=False): eval, 1803.
    y = aten._batch_norm_no_update(x, w, b, rm.clone(), rv.clone(), 0.1, 1e-5)[0]
    assert _op_count(torchscan, lambda: y.backward(g), op) == 1803
    # Its decomposition is native_batch_norm_backward's: 9N + 4C = 2712.
    _, sm, si = aten.native_batch_norm(x.detach(), w.detach(), None, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    args = (g, x.detach(), w.detach(), rm, rv, sm, si, True, 1e-5, [True, True, True], torch.empty(0, dtype=torch.uint8))
    assert _total(torchscan, lambda: decomposition_table[aten.batch_norm_backward.default](*args)) == 2712


def test_cudnn_and_miopen_batch_norm_backward(torchscan):
    # GPU-only kernels, run on meta tensors: training statistics and every
    # output, 10N + 3C with N = 300, C = 3 -> 3009.
    xm, wm = torch.randn(4, 3, 5, 5, device="meta"), torch.randn(3, device="meta")
    reserve = torch.empty(0, device="meta", dtype=torch.uint8)
    assert _op_count(torchscan, lambda: aten.cudnn_batch_norm_backward(xm, xm, wm, wm, wm, wm, wm, 1e-5, reserve),
                     "aten.cudnn_batch_norm_backward") == 3009
    assert _op_count(torchscan, lambda: aten.miopen_batch_norm_backward(xm, xm, wm, wm, wm, wm, wm, 1e-5),
                     "aten.miopen_batch_norm_backward") == 3009
    # Their decomposition calls native_batch_norm_backward(train=True, all
    # outputs): the same 3009, on CPU tensors.
    x, w = torch.randn(4, 3, 5, 5), torch.randn(3)
    r = _measure(torchscan, lambda: decomposition_table[aten.cudnn_batch_norm_backward.default](
        x, x, w, w, w, w, w, 1e-5, torch.empty(0, dtype=torch.uint8)))
    assert r["by_operator"] == {"aten.native_batch_norm_backward": 3009}


# ---------------------------------------------------------------- RMSNorm


def test_rms_norm_backward_on_cpu_is_pointwise_ops(torchscan):
    # torch 2.13 has no CPU _fused_rms_norm_backward: nn.RMSNorm's backward on
    # CPU is the autograd of the composite's pow/mean/add/rsqrt/mul, each
    # counted by its own row; the total is complete.
    m = nn.RMSNorm(8)
    x = torch.randn(4, 5, 8, requires_grad=True)
    y = m(x)
    r = _measure(torchscan, lambda: y.backward(torch.ones_like(y)))
    assert "aten._fused_rms_norm_backward" not in r["by_operator"]
    assert set(r["by_operator"]) <= {"aten.mul", "aten.sum", "aten.pow", "aten.div", "aten.add", "aten.add_"}


@pytest.mark.parametrize("weight,mask", [(True, [True, True]), (True, [True, False]), (False, [True, False])])
def test_fused_rms_norm_backward_meta_and_decomposition(torchscan, weight, mask):
    # (4, 5, 8) over [8]: N = 160, D = 8, R = 20. CUDA compute_gI<rms_norm>:
    # grad_input (8 + 2W)N; grad_weight 3N - D = 472.
    n, d, r = 160, 8, 20
    w = int(weight)
    kernel_expected = mask[0] * (8 + 2 * w) * n + mask[1] * (3 * n - d)
    xm = torch.randn(4, 5, 8, device="meta")
    wm = torch.randn(8, device="meta") if weight else None
    rstd_m = torch.randn(4, 5, 1, device="meta")
    kernel = _op_count(torchscan, lambda: aten._fused_rms_norm_backward(xm, xm, [8], rstd_m, wm, mask),
                       "aten._fused_rms_norm_backward")
    assert kernel == kernel_expected
    # decompositions._fused_rms_norm_backward: grad_x_hat = g * w (W N),
    # x_hat = x * rstd N; grad_input: x_hat * grad_x_hat N, sum N - R,
    # x_hat / D N, * sum N, subtract N, * rstd N; grad_weight g * x_hat N and
    # the row-wise sum N - D. It reuses x_hat where the kernel recomputes
    # x * rstd (in the row sum, in dx and in grad_weight) and scales once by
    # rstd instead of forming rstd / D per row.
    x, rstd = torch.randn(4, 5, 8), torch.rand(4, 5, 1) + 0.5
    wt = torch.randn(8) if weight else None
    decomp = _total(torchscan, lambda: decomposition_table[aten._fused_rms_norm_backward.default](
        x, x, [8], rstd, wt, mask))
    assert decomp == w * n + n + mask[0] * (6 * n - r) + mask[1] * w * (2 * n - d)
    # Both outputs with a weight: kernel 1600 + 472 = 2072, decomposition
    # 1600 - 20 - 8 = 1572: the kernel's recomputation costs 3N + R = 500 more.
    if weight and mask == [True, True]:
        assert kernel - decomp == 3 * n + r


# ---------------------------------------------------------------- weight norm


def test_weight_norm_interface_backward(torchscan):
    op = "aten._weight_norm_interface_backward"
    # Linear(6, 4) weight v (4, 6), dim 0: N = 24, R = 4 -> 5N + 3R = 132.
    lin = torch.nn.utils.parametrizations.weight_norm(nn.Linear(6, 4))
    y = lin(torch.randn(5, 6))
    assert _op_count(torchscan, lambda: y.sum().backward(), op) == 132
    # The last dim (dim=1): R = 6 -> 120 + 18 = 138.
    lin = torch.nn.utils.parametrizations.weight_norm(nn.Linear(6, 4), dim=1)
    y = lin(torch.randn(5, 6))
    assert _op_count(torchscan, lambda: y.sum().backward(), op) == 138
    # No torch._decomp entry; the differentiable composite
    # (_weight_norm_differentiable_backward: sum(grad_w * v) 2N - R,
    # grad_v = (g / norm) * (grad_w - v * (sums / (norm * norm))) 3N + 3R,
    # grad_g = sums / norm R) computes the same 5N + 3R.
    v, g, gw = torch.randn(4, 6), torch.randn(4, 1), torch.randn(4, 6)
    norms = v.norm(dim=1, keepdim=True)
    assert _op_count(torchscan, lambda: aten._weight_norm_interface_backward(gw, v, g, norms, 0), op) == 132
    assert _total(torchscan, lambda: aten._weight_norm_differentiable_backward(gw, v, g, norms, 0)) == 132
