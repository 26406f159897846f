"""The module view (module_flops, macs, dmas) on standard layers.

Expected values are TorchScan's published per-layer figures (the original
torchscan project's test suite and docs, frgfm/torch-scan: tests/test_modules.py,
tests/test_primitives.py, tests/test_lookup_layout.py, docs/docs/index.md,
docs/docs/methodology.md), each re-derived below as arithmetic from the
torchscan_flops_v1 conventions."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import module_view_totals


def costs(torchscan, module, *inputs, grad=False):
    with torch.set_grad_enabled(grad):
        return module_view_totals(torchscan, lambda: module(*inputs))


def test_conv_relu_docs_example(torchscan):
    # Conv2d(3,8,3) on (1,3,32,32) -> (1,8,30,30): N_out = 7200 dots of T = 3*9 = 27 terms:
    # FLOPs 7200*(2*27-1) + 7200 bias = 388800; MACs 7200*27 = 194400;
    # DMAs 7200*27 taps + (216 + 8) parameters + 7200 writes = 201824.
    # ReLU on 7200 values: 7200 FLOPs, 0 MACs, 7200 reads + 7200 writes.
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()).eval()
    assert costs(torchscan, model, torch.zeros(1, 3, 32, 32)) == (396000, 194400, 216224)


@pytest.mark.parametrize("shape, bias, expected", [
    # 4 outputs of 8-term dots: 4*15 + 4 bias = 64; MACs 32; DMAs 8 + (32+4) + 4 = 48.
    ((1, 8), True, (64, 32, 48)),
    ((1, 8), False, (60, 32, 44)),
    # Leading dims multiply the rows: 2 rows -> 128 / 64; DMAs 16 + 36 + 8 = 60.
    ((1, 2, 8), True, (128, 64, 60)),
])
def test_linear(torchscan, shape, bias, expected):
    assert costs(torchscan, nn.Linear(8, 4, bias=bias), torch.zeros(*shape)) == expected


def test_transposed_convolution(torchscan):
    # The conventions' example: (2,4,3), Cout=6, groups=2, k=3, stride 2, padding = output_padding = 1:
    # 24 inputs x 6/2 channels x 3 taps = 216 products -> 432 FLOPs + 72 output biases = 504.
    conv = nn.ConvTranspose1d(4, 6, 3, groups=2, stride=2, padding=1, output_padding=1)
    flops, macs, _ = costs(torchscan, conv, torch.zeros(2, 4, 3))
    assert (flops, macs) == (504, 216)
    # ConvTranspose2d(3,8,3) on (1,3,32,32) -> (1,8,34,34) = 9248 outputs:
    # products 3072*8*9 = 221184 -> FLOPs 442368 + 9248 = 451616; DMAs: 3*9*9248 taps
    # + 224 parameters + 9248 writes + 5 legacy accesses per spatial dim (10) = 259178.
    assert costs(torchscan, nn.ConvTranspose2d(3, 8, 3), torch.zeros(1, 3, 32, 32)) == (451616, 221184, 259178)


def test_grouped_convolutions(torchscan):
    # Conv1d(4,6,3,groups=2,bias=False) on (2,4,7) -> (2,6,5): 60 outputs of 2*3 = 6 terms:
    # 60*11 = 660 FLOPs, 360 MACs.
    flops, macs, _ = costs(torchscan, nn.Conv1d(4, 6, 3, groups=2, bias=False), torch.zeros(2, 4, 7))
    assert (flops, macs) == (660, 360)
    # Depthwise-multiplier Conv2d(3,6,3,groups=3,padding=1) on (1,3,5,5): 150 outputs of 9 terms:
    # 150*17 + 150 bias = 2700; MACs 1350.
    flops, macs, _ = costs(torchscan, nn.Conv2d(3, 6, 3, groups=3, padding=1), torch.zeros(1, 3, 5, 5))
    assert (flops, macs) == (2700, 1350)


def test_batch_norm(torchscan):
    x = torch.zeros(1, 8, 4)  # N = 32, C = 8, M = 4
    bn = nn.BatchNorm1d(8).train()
    # FLOPs: 2N + 2C + 2N affine + 4N batch stats + 8C updates = 64+16+64+128+64 = 336.
    # MACs: N*(1+1) + C*(M-1) + C*(2M-1) + 4C = 64 + 24 + 56 + 32 = 176.
    # DMAs of native_batch_norm: 2N + eps + 2C running + 2C affine + momentum + 2C written = 114;
    # the integer counter's own add_ reads the counter and the wrapped 1 and writes: 3.
    assert costs(torchscan, bn, x) == (336, 176, 117)
    bn.eval()
    # Saved statistics: FLOPs 2N + 2C + 2N = 144; MACs 2N = 64; DMAs 2N + 1 + 2C + 2C + 1 = 98.
    assert costs(torchscan, bn, x) == (144, 64, 98)


def test_normalization_primitives(torchscan):
    # LayerNorm(4) on (1,3,4): N = 12, R = 3: 6N + 2R + 2N = 102; MACs 2N = 24;
    # DMAs 4N + 5R + 1 + 8 params + 2N = 96 (64 without affine).
    assert costs(torchscan, nn.LayerNorm(4), torch.zeros(1, 3, 4)) == (102, 24, 96)
    assert costs(torchscan, nn.LayerNorm(4, elementwise_affine=False), torch.zeros(1, 3, 4))[2] == 64
    # GroupNorm(2,4) on (2,4,2): N = 16, R = 4: 8N + 2R = 136; MACs 32; DMAs 64+20+1+8+32 = 125.
    assert costs(torchscan, nn.GroupNorm(2, 4), torch.zeros(2, 4, 2)) == (136, 32, 125)
    assert costs(torchscan, nn.GroupNorm(2, 4, affine=False), torch.zeros(2, 4, 2)) == (104, 16, 85)
    # RMSNorm((2,4)) on (2,2,4): N = 16, R = 2: 4N + 2R = 68; MACs 32; DMAs 3N+4R+1+8+2N = 97.
    assert costs(torchscan, nn.RMSNorm((2, 4)), torch.zeros(2, 2, 4)) == (68, 32, 97)
    assert costs(torchscan, nn.RMSNorm((2, 4), elementwise_affine=False), torch.zeros(2, 2, 4)) == (52, 16, 57)


def test_activations_and_softmax(torchscan):
    x = torch.ones(2, 4)  # N = 8, rows R = 2 of S = 4
    assert costs(torchscan, nn.GELU(), x) == (40, 0, 16)
    assert costs(torchscan, nn.GELU(approximate="tanh"), x) == (112, 0, 16)
    assert costs(torchscan, nn.SiLU(), x) == (40, 0, 16)
    assert costs(torchscan, nn.GLU(), x) == (20, 0, 12)  # 4 outputs: 5*4; reads 8, writes 4
    assert costs(torchscan, nn.PReLU(), x) == (32, 0, 17)  # 4N, reads its 1 weight too
    # Softmax: 5N - 2R = 36, accesses 8N + 4R = 72; LogSoftmax 4N - R = 30, 8N + 6R = 76;
    # Softmin: negate (N, 2N accesses) + softmax = 44 / 88.
    assert costs(torchscan, nn.Softmax(-1), x) == (36, 0, 72)
    assert costs(torchscan, nn.LogSoftmax(-1), x) == (30, 0, 76)
    assert costs(torchscan, nn.Softmin(-1), x) == (44, 0, 88)


def test_pooling(torchscan):
    x = torch.zeros(1, 8, 4, 4)  # 2x2 windows -> 32 outputs, K = 4
    # Max: 32*3 FLOPs and MACs, 32*(4+1) accesses.
    assert costs(torchscan, nn.MaxPool2d((2, 2)), x) == (96, 96, 160)
    # Average: 32*4 FLOPs, MACs 32*(3+2) legacy, accesses 32*5.
    assert costs(torchscan, nn.AvgPool2d((2, 2)), x) == (128, 160, 160)
    # Adaptive, non-divisible: (2,4,7,8) -> (3,4): visits 8 channels-batch x (7+3-1)(8+4-4) = 576,
    # outputs 96: max 480 / 480 / 576 + 2*96 (indices); average 576 / 576 + 96 / 576 + 96.
    y = torch.zeros(2, 4, 7, 8)
    assert costs(torchscan, nn.AdaptiveMaxPool2d((3, 4)), y) == (480, 480, 768)
    assert costs(torchscan, nn.AdaptiveAvgPool2d((3, 4)), y) == (576, 672, 672)


def test_lookups_layout_and_interpolation(torchscan):
    # Embedding: 4 ids read + 4 rows of 4 gathered + written: 4 + 2*16 = 36.
    assert costs(torchscan, nn.Embedding(10, 4), torch.tensor([[1, 1], [2, 3]])) == (0, 0, 36)
    # Constant padding reads the kept input and writes the output: 8 + 12 = 20; with a
    # negative pad the input keeps 6 values: 6 + 6 = 12. Reflection gathers: 2 * 12.
    assert costs(torchscan, nn.ConstantPad1d(1, 0.0), torch.zeros(2, 4)) == (0, 0, 20)
    assert costs(torchscan, nn.ConstantPad1d((-1, 0), 0.0), torch.zeros(2, 4)) == (0, 0, 12)
    assert costs(torchscan, nn.ReflectionPad1d(1), torch.zeros(2, 4)) == (0, 0, 24)
    # Views cost nothing.
    assert costs(torchscan, nn.Flatten(), torch.zeros(2, 4)) == (0, 0, 0)
    # Bicubic (K = 16) to 16 outputs: 31*16 = 496, 256 MACs, 17*16 = 272 accesses.
    assert costs(torchscan, nn.Upsample(size=4, mode="bicubic"), torch.zeros(1, 1, 2, 2)) == (496, 256, 272)
    # Area = exact adaptive average: 4x4 -> 2x2 visits 16, MACs 16 + 4, accesses 16 + 4.
    assert costs(torchscan, nn.Upsample(size=2, mode="area"), torch.zeros(1, 1, 4, 4)) == (16, 20, 20)
    assert costs(torchscan, nn.Upsample(scale_factor=2, mode="nearest"), torch.zeros(1, 1, 2, 2)) == (0, 0, 32)


def test_cpu_sdpa_module_view(torchscan):
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    # A = 1*2*3*5 = 30 scores, R = 6 rows, d = dv = 4:
    # FLOPs: scores 30*7 + scale 30 + softmax (150 - 12) + values 6*4*9 = 594
    # MACs: 30*4 + 30*4 = 240
    # DMAs: (24 + 40 + 30) + 60 + (240 + 24) + (30 + 40 + 24) = 512
    assert costs(torchscan, lambda: F.scaled_dot_product_attention(q, k, v)) == (594, 240, 512)
    # A causal mask costs one operation per score and 2A accesses.
    causal = costs(torchscan, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert causal == (594 + 30, 240, 512 + 60)


def test_module_view_is_partial_and_names_what_it_cannot_count(torchscan):
    x = torch.randn(3, 4)
    with torchscan.scan() as s:
        torch.ops.aten._upsample_bilinear2d_aa(x[None, None], [2, 2], False, None)  # no formula
        torch.mm(x, x.t())
    report = s.module_report()
    for name in ("module_flops", "macs", "dmas"):
        assert report["totals"][name]["status"] == "partial"
    # (3x4)(4x3): 9 dots of 4 terms = 9*7 FLOPs is the known part of module_flops.
    assert report["totals"]["module_flops"]["known_value"] == 63
    assert {(d["code"], d["operator"], d["metric"]) for d in report["diagnostics"]} == {
        ("uncounted_operator", "aten._upsample_bilinear2d_aa", m) for m in ("module_flops", "macs", "dmas")}


def test_dropout_and_reductions(torchscan):
    x = torch.zeros(2, 3)  # N = 6
    # Training dropout: mask + rescale 2N = 12, no MACs; reads N and p, writes N: 13.
    assert costs(torchscan, lambda: F.dropout(x, 0.5, training=True)) == (12, 0, 13)
    # Eval: no arithmetic; the same staged accesses.
    assert costs(torchscan, lambda: F.dropout(x, 0.5, training=False)) == (0, 0, 13)
    # mean over dim 1: 4 adds + 2 divides; reads 6, writes 2.
    assert costs(torchscan, lambda: x.mean(1)) == (6, 0, 8)
    # Integer arithmetic is excluded from FLOPs, but its accesses still happen.
    i = torch.arange(6)
    assert costs(torchscan, lambda: i + i) == (0, 0, 18)


def test_fused_multi_head_attention_and_encoder_layer(torchscan):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 4, 8)  # B = 2, T = S = 4, E = 8, H = 2, D = 4, A = 64 scores, R = 16 rows
    # projections 3 * 64*(2*8 - 1 + 1) = 3072, query scale 64, scores 64*7 = 448,
    # softmax 16*(20 - 2) = 288, values 64*7 = 448, output projection 64*15 + 64 = 1024,
    # averaged weights 64: 5408 (TorchScan's published figure for this call).
    assert costs(torchscan, lambda: mha(x, x, x))[0] == 5408

    small = nn.MultiheadAttention(4, 2, batch_first=True).eval()
    y = torch.randn(1, 3, 4)  # B = 1, L = 3, E = 4: Q = J = 12, A = 18, R = 6, inputs 36
    # MACs: 4*36 + 2*1*3*3*4 + 3*16 = 264. DMAs: 36 + params (48 + 16 + 12 + 4) + 7*12 + 4*12
    # + 10*18 + 4*6 = 452; returned averaged weights add A + B*T*S = 27.
    assert costs(torchscan, lambda: small(y, y, y, need_weights=False))[1:] == (264, 452)
    assert costs(torchscan, lambda: small(y, y, y))[1:] == (264, 479)

    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True).eval()
    # Attention without weights 588 + 2 residual adds 24 + 2 LayerNorms 2*102 + feed-forward
    # (3*8*7 + 24) + 24 ReLU + (3*4*15 + 12) = 408 -> 1224 FLOPs; MACs 264 + 3*(32+32) + 2*24 = 504;
    # DMAs 452 + FF (24 + 96 + 76) + LNs 2*96 + residuals 2*36 = 912.
    assert costs(torchscan, lambda: layer(y)) == (1224, 504, 912)
