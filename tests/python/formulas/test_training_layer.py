"""torchscan_training_v1 layer backward rows (formulas/layer_backward.h):
pooling, interpolation, embedding, distance and grid-sampling gradients,
measured on the real ATen kernels autograd runs for the nn layers.

Every expected value is derived by hand in the comment next to it from the
row's derivation (formulas/layer_backward.h); where
torch._decomp.decomposition_table holds the kernel, counting the
decomposition on the same tensors is compared with the kernel's count."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch._decomp import decomposition_table

aten = torch.ops.aten


def _backward(torchscan, out, *inputs):
    """Report of out.backward(ones) alone (the forward ran outside the scan)."""
    grad = torch.ones_like(out)
    report = torchscan.measure_flops(lambda: out.backward(grad))
    assert report["total"]["status"] == "complete", report["diagnostics"]
    return report


def _count(torchscan, out, packet):
    report = _backward(torchscan, out)
    assert packet in report["by_operator"], report["by_operator"]
    return report["by_operator"][packet]


def _x(*shape):
    return torch.randn(*shape, requires_grad=True)


# --- pooling ---------------------------------------------------------------------------------------------------------

def test_max_pool_gradients_add_each_output_gradient_once(torchscan):
    # (1,2,5,5), 3x3 windows, stride 2, padding 1 -> (1,2,3,3): 18 output gradients, one add each -> 18.
    out = F.max_pool2d(_x(1, 2, 5, 5), 3, stride=2, padding=1)
    assert _count(torchscan, out, "aten.max_pool2d_with_indices_backward") == 18
    # (1,2,4,4,4), 2x2x2 windows -> (1,2,2,2,2): 16.
    out = F.max_pool3d(_x(1, 2, 4, 4, 4), 2)
    assert _count(torchscan, out, "aten.max_pool3d_with_indices_backward") == 16
    # Adaptive: (1,2,5,5) -> (3,2): 12; (1,2,4,4,4) -> (3,2,3): 36.
    out = F.adaptive_max_pool2d(_x(1, 2, 5, 5), (3, 2))
    assert _count(torchscan, out, "aten.adaptive_max_pool2d_backward") == 12
    out = F.adaptive_max_pool3d(_x(1, 2, 4, 4, 4), (3, 2, 3))
    assert _count(torchscan, out, "aten.adaptive_max_pool3d_backward") == 36


def test_max_pool2d_backward_matches_its_scatter_add_decomposition(torchscan):
    # The decomposition scatter_adds the 18 output gradients at their indices:
    # one add per index element -> 18, the kernel's count.
    x = torch.randn(1, 2, 5, 5)
    out, indices = aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])
    args = (torch.randn_like(out), x, [3, 3], [2, 2], [1, 1], [1, 1], False, indices)
    kernel = torchscan.measure_flops(lambda: aten.max_pool2d_with_indices_backward(*args))
    decomposed = torchscan.measure_flops(
        lambda: decomposition_table[aten.max_pool2d_with_indices_backward.default](*args))
    assert kernel["total"]["status"] == decomposed["total"]["status"] == "complete"
    assert kernel["by_operator"] == {"aten.max_pool2d_with_indices_backward": 18}
    assert decomposed["by_operator"]["aten.scatter_add"] == 18
    assert decomposed["total"]["value"] == kernel["total"]["value"] == 18


@pytest.mark.parametrize("kwargs", [{}, {"count_include_pad": False}, {"divisor_override": 2}])
def test_avg_pool2d_gradient_divides_once_and_adds_per_window_value(torchscan, kwargs):
    # 18 outputs of K = 9 values: 1 divide + 9 adds each -> 180; the divisor
    # options change the divisor's value, not the count.
    out = F.avg_pool2d(_x(1, 2, 5, 5), 3, stride=2, padding=1, **kwargs)
    assert _count(torchscan, out, "aten.avg_pool2d_backward") == 180


def test_avg_pool3d_gradient(torchscan):
    # (1,2,4,4,4) by 2x2x2 (K = 8) -> 16 outputs: (8 + 1) * 16 = 144.
    out = F.avg_pool3d(_x(1, 2, 4, 4, 4), 2)
    assert _count(torchscan, out, "aten.avg_pool3d_backward") == 144
    # ceil_mode windows are nominal (as the forward row): (1,1,5,5,5) by 2 with
    # ceil -> (1,1,3,3,3) = 27 outputs of K = 8: 9 * 27 = 243.
    out = F.avg_pool3d(_x(1, 1, 5, 5, 5), 2, ceil_mode=True)
    assert _count(torchscan, out, "aten.avg_pool3d_backward") == 243


def test_adaptive_avg_pool_gradients(torchscan):
    # (1,2,5,5) -> (3,2): visits H 5 + 3 - 1 = 7, W 5 + 2 - 1 = 6: V = 2 * 42 = 84 adds;
    # 12 windows, one divide each -> 96.
    out = F.adaptive_avg_pool2d(_x(1, 2, 5, 5), (3, 2))
    assert _count(torchscan, out, "aten._adaptive_avg_pool2d_backward") == 96
    # (1,2,4,4,4) -> (3,2,3): D 4 + 3 - 1 = 6, H 4 + 2 - 2 = 4, W 6: V = 2 * 144 = 288; O = 36 -> 324.
    out = F.adaptive_avg_pool3d(_x(1, 2, 4, 4, 4), (3, 2, 3))
    assert _count(torchscan, out, "aten._adaptive_avg_pool3d_backward") == 324


# --- interpolation ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,mode,packet,expected", [
    # One add per output gradient: (1,2,10) = 20, (1,2,10,10) = 200, (1,2,8,8,8) = 1024.
    ((1, 2, 5), "nearest", "aten.upsample_nearest1d_backward", 20),
    ((1, 2, 5, 5), "nearest", "aten.upsample_nearest2d_backward", 200),
    ((1, 2, 4, 4, 4), "nearest", "aten.upsample_nearest3d_backward", 1024),
    ((1, 2, 5), "nearest-exact", "aten._upsample_nearest_exact1d_backward", 20),
    ((1, 2, 5, 5), "nearest-exact", "aten._upsample_nearest_exact2d_backward", 200),
    ((1, 2, 4, 4, 4), "nearest-exact", "aten._upsample_nearest_exact3d_backward", 1024),
    # K neighbours, a multiply and an add each: 2K per output gradient.
    ((1, 2, 5), "linear", "aten.upsample_linear1d_backward", 2 * 2 * 20),
    ((1, 2, 5, 5), "bilinear", "aten.upsample_bilinear2d_backward", 2 * 4 * 200),
    ((1, 2, 4, 4, 4), "trilinear", "aten.upsample_trilinear3d_backward", 2 * 8 * 1024),
    ((1, 2, 5, 5), "bicubic", "aten.upsample_bicubic2d_backward", 2 * 16 * 200),
])
def test_interpolation_gradients(torchscan, shape, mode, packet, expected):
    out = F.interpolate(_x(*shape), scale_factor=2, mode=mode)
    assert _count(torchscan, out, packet) == expected


def test_bicubic_gradient_of_an_identity_resize_is_a_copy(torchscan):
    # Equal input and output sizes: the CPU kernel copies the gradient -> 0.
    out = F.interpolate(_x(1, 2, 5, 5), size=(5, 5), mode="bicubic")
    assert _count(torchscan, out, "aten.upsample_bicubic2d_backward") == 0


# --- embeddings ------------------------------------------------------------------------------------------------------

IDS = torch.tensor([[1, 2, 1], [0, 4, 9]])  # L = 6 lookups


@pytest.mark.parametrize("kwargs,expected", [
    ({}, 6 * 3),                                   # one add per looked-up value: L * D = 18
    ({"padding_idx": 0}, 6 * 3),                   # padding ids counted nominally: 18
    ({"scale_grad_by_freq": True}, 6 * (2 * 3 + 1)),  # 1 / count + D multiplies + D adds per lookup: 42
])
def test_embedding_gradient(torchscan, kwargs, expected):
    out = F.embedding(IDS, _x(10, 3), **kwargs)
    assert _count(torchscan, out, "aten.embedding_dense_backward") == expected


@pytest.mark.parametrize("freq", [False, True])
def test_embedding_dense_backward_against_its_decomposition(torchscan, freq):
    # grad_output (2,3,5): L = 6, D = 5, LD = 30. The decomposition selects every
    # gradient value through the validity/padding mask (masked_fill: LD) and
    # accumulates it (index_put: LD) -> 2 LD = 60 against the kernel's LD = 30,
    # which tests the ids as integers instead. With scale_grad_by_freq it also
    # divides every value by its count (div: LD) -> 3 LD = 90, where the kernel
    # divides once per lookup and multiplies per value: L (2D + 1) = 66.
    # Difference: LD selections, and LD divides against L divides + LD multiplies.
    grad = torch.randn(2, 3, 5)
    args = (grad, IDS, 10, -1, freq)
    kernel = torchscan.measure_flops(lambda: aten.embedding_dense_backward(*args))
    decomposed = torchscan.measure_flops(lambda: decomposition_table[aten.embedding_dense_backward.default](*args))
    assert kernel["total"]["status"] == "complete"
    lookups, d = 6, 5
    expected_kernel = lookups * (2 * d + 1) if freq else lookups * d
    assert kernel["total"]["value"] == expected_kernel
    by_op = decomposed["by_operator"]
    assert by_op["aten.masked_fill"] == lookups * d
    assert by_op["aten.index_put"] == lookups * d
    assert by_op.get("aten.div", 0) == (lookups * d if freq else 0)
    difference = lookups * d - (lookups if freq else 0)
    assert decomposed["total"]["known_value"] - kernel["total"]["value"] == difference


FLAT = torch.tensor([1, 2, 1, 0, 4, 9])  # 6 lookups
OFFSETS = torch.tensor([0, 2])           # 2 bags


@pytest.mark.parametrize("mode,expected", [
    ("sum", 6 * 3),              # one axpy of D with scale 1 per lookup: 18 adds
    ("mean", 6 * (2 * 3 + 1)),   # 1 / bag_size + D multiplies + D adds per lookup: 42
    ("max", 2 * 3),              # one add per bag and value: 6
])
def test_embedding_bag_gradient(torchscan, mode, expected):
    out = F.embedding_bag(FLAT, _x(10, 3), OFFSETS, mode=mode)
    assert _count(torchscan, out, "aten._embedding_bag_backward") == expected


def test_embedding_bag_per_sample_weights_and_sparse_gradients(torchscan):
    weights = _x(6)
    out = F.embedding_bag(FLAT, _x(10, 3), OFFSETS, mode="sum", per_sample_weights=weights)
    report = _backward(torchscan, out)
    # Weight gradient: scale = per-sample weight, D multiplies + D adds per lookup: 36.
    assert report["by_operator"]["aten._embedding_bag_backward"] == 6 * 2 * 3
    # Per-sample-weight gradient: a D = 3 dot per lookup, 2D each: 36.
    assert report["by_operator"]["aten._embedding_bag_per_sample_weights_backward"] == 6 * 2 * 3
    # Sparse mean: the 6 gathered rows are divided by their bag sizes: L * D = 18.
    # (AccumulateGrad then rebuilds the sparse leaf gradient with
    # aten::_sparse_coo_tensor_with_dims_and_tensors, a constructor outside this
    # row; the row itself must leave nothing uncounted.)
    out = F.embedding_bag(FLAT, _x(10, 3), OFFSETS, mode="mean", sparse=True)
    grad = torch.ones_like(out)
    report = torchscan.measure_flops(lambda: out.backward(grad))
    assert report["by_operator"]["aten._embedding_bag_backward"] == 6 * 3
    named = [d for d in report["diagnostics"] if "embedding" in (d.get("operator") or "") + d["message"]]
    assert not named, named


@pytest.mark.parametrize("mode,expected", [
    (0, 6 * 3),            # sum: one axpy of D = 3 with scale 1 per lookup, L = 6: 18 adds
    (1, 6 * (2 * 3 + 1)),  # mean: 1 / bag_size + D multiplies + D adds per lookup: 42
])
def test_embedding_bag_dense_backward_called_directly(torchscan, mode, expected):
    # The kernel _embedding_bag_backward calls for a dense gradient, on its own.
    # Bags [1, 2] and [1, 0, 4, 9] (offset2bag, bag sizes 2 and 4); grad ones (2 bags, D = 3).
    offset2bag, bag_size = torch.tensor([0, 0, 1, 1, 1, 1]), torch.tensor([2, 4])
    max_indices = torch.zeros(2, 3, dtype=torch.long)  # read by mode 2 (max) only
    grad = torch.ones(2, 3)
    args = (grad, FLAT, offset2bag, bag_size, max_indices, 10, False, mode, None, -1)
    report = torchscan.measure_flops(lambda: aten._embedding_bag_dense_backward(*args))
    assert report["total"] == {**report["total"], "status": "complete", "value": expected}
    assert report["by_operator"] == {"aten._embedding_bag_dense_backward": expected}
    # Row 1 is looked up once in each bag: sum 1 + 1 = 2, mean 1/2 + 1/4 = 0.75.
    assert aten._embedding_bag_dense_backward(*args)[1, 0].item() == (2.0 if mode == 0 else 0.75)


# --- distances -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("p,per_coordinate,per_pair", [
    (1.0, 4, 0),        # diff, sign, multiply, accumulate
    (2.0, 4, 2),        # diff, multiply, divide, accumulate; the dist == 0 guard per pair
    (math.inf, 11, 0),  # diff, 9 for the max-norm derivative, accumulate
])
def test_cdist_gradient(torchscan, p, per_coordinate, per_pair):
    # x1 (3,4) against x2 (2,4): 6 pairs of M = 4 coordinates; only x1 needs a gradient.
    out = torch.cdist(_x(3, 4), torch.randn(2, 4), p=p)
    assert _count(torchscan, out, "aten._cdist_backward") == 6 * (per_coordinate * 4 + per_pair)


@pytest.mark.parametrize("p,per_coordinate,per_pair", [
    (1.0, 5, 0),        # as cdist, with a second accumulation into row j
    (2.0, 5, 2),
    (math.inf, 12, 0),
])
def test_pdist_gradient(torchscan, p, per_coordinate, per_pair):
    # 3 rows of M = 4: 3 pairs.
    out = F.pdist(_x(3, 4), p=p)
    assert _count(torchscan, out, "aten._pdist_backward") == 3 * (per_coordinate * 4 + per_pair)


def test_distance_gradient_of_another_order_is_reported(torchscan):
    out = torch.cdist(_x(3, 4), torch.randn(2, 4), p=3.0)
    grad = torch.ones_like(out)
    report = torchscan.measure_flops(lambda: out.backward(grad))
    assert report["total"]["status"] != "complete"
    codes = {(d["code"], d.get("operator")) for d in report["diagnostics"]}
    assert any(code == "unsupported_norm_order" and "cdist_backward" in (op or "") for code, op in codes), codes


# --- grid sampling ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,input_grad,expected", [
    # input (1,2,5,5), grid (1,3,4,2): 12 locations x 2 channels = 24 values.
    # bilinear: input 8 per value; grid 2 * (4 + 3 + 1 + 1) = 18 per value; 2 per location.
    ("bilinear", True, 8 * 24 + 18 * 24 + 2 * 12),
    ("bilinear", False, 18 * 24 + 2 * 12),
    # nearest: one add per value into the input gradient; the grid gradient is zero-filled.
    ("nearest", True, 24),
    # bicubic: input 32 per value; grid 2 * (16 + 15 + 1 + 1) = 66 per value; 2 per location.
    ("bicubic", True, 32 * 24 + 66 * 24 + 2 * 12),
])
def test_grid_sampler_gradient(torchscan, mode, input_grad, expected):
    x = torch.randn(1, 2, 5, 5, requires_grad=input_grad)
    grid = (torch.rand(1, 3, 4, 2) * 2 - 1).requires_grad_()
    out = F.grid_sample(x, grid, mode=mode, align_corners=False)
    assert _count(torchscan, out, "aten.grid_sampler_2d_backward") == expected


# --- padding ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_padding_gradients_add_each_output_gradient_once(torchscan, mode):
    # (1,2,3,3) padded by (1,1,1,1) -> (1,2,5,5): 50 output gradients, each added once
    # into the input position it was copied from: 50. 1-d: (1,2,4) by (2,1) -> (1,2,7): 14.
    kernel = {"reflect": "aten.reflection_pad", "replicate": "aten.replication_pad"}[mode]
    assert _count(torchscan, F.pad(_x(1, 2, 3, 3), (1, 1, 1, 1), mode=mode), kernel + "2d_backward") == 50
    assert _count(torchscan, F.pad(_x(1, 2, 4), (2, 1), mode=mode), kernel + "1d_backward") == 14
    # 3-d: (1,2,2,3,3) padded by 1 on all six sides -> (1,2,4,5,5): 2*4*5*5 = 200.
    assert _count(torchscan, F.pad(_x(1, 2, 2, 3, 3), (1,) * 6, mode=mode), kernel + "3d_backward") == 200


@pytest.mark.parametrize("op,grad_shape,self_shape,padding,outputs", [
    # outputs = the kernel's count, one add per output gradient:
    # 1-d (1,2,4) by (2,1) -> (1,2,7): 14; 3-d (1,2,2,3,3) by 1 on six sides -> (1,2,4,5,5): 200.
    (aten.reflection_pad1d_backward.default, (1, 2, 7), (1, 2, 4), [2, 1], 14),
    (aten.reflection_pad3d_backward.default, (1, 2, 4, 5, 5), (1, 2, 2, 3, 3), [1] * 6, 200),
])
def test_reflection_pad_1d_3d_backward_decompositions_are_masked_gathers(torchscan, op, grad_shape, self_shape,
                                                                         padding, outputs):
    # The same gather as the 2-d decomposition below (row: "partial, never equal").
    g, x = torch.ones(grad_shape), torch.randn(self_shape)
    assert _count(torchscan, F.pad(x.clone().requires_grad_(), padding, mode="reflect"),
                  "aten." + op.name().split("::")[1].split(".")[0]) == outputs
    report = torchscan.measure_flops(lambda: decomposition_table[op](g, x, padding))
    assert report["total"]["status"] == "partial"
    assert [d["operator"] for d in report["diagnostics"]] == ["aten._unsafe_masked_index"]
    assert report["total"]["known_value"] > outputs


def test_reflection_pad_backward_decomposition_is_a_masked_gather(torchscan):
    # torch._decomp writes reflection_pad2d_backward as a gather: every input
    # position collects its candidate output gradients through masks
    # (_unsafe_masked_index, which has no row, and masked_fill over all
    # candidates). It does more work than the kernel's one add per output
    # gradient (50 here), and part of it is not counted: partial, never equal.
    g, x = torch.ones(1, 2, 5, 5), torch.randn(1, 2, 3, 3)
    decomposition = decomposition_table[aten.reflection_pad2d_backward.default]
    report = torchscan.measure_flops(lambda: decomposition(g, x, [1, 1, 1, 1]))
    assert report["total"]["status"] == "partial"
    assert [d["operator"] for d in report["diagnostics"]] == ["aten._unsafe_masked_index"]
    assert report["total"]["known_value"] > 50
