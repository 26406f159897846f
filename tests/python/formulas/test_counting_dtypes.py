"""The computation dtype of pointwise operators (formulas/CONVENTIONS.md):
integer operands with a floating result compute in floating point and are
counted; integer arithmetic stays excluded. Each expected value is derived
by hand in the comment beside it."""

import pytest
import torch

from conftest import module_view_totals as module_view


def op_view(torchscan, fn):
    report = torchscan.measure_flops(fn)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    return report["total"]["value"]


I = torch.arange(1, 1001)  # 1,000 int64 values
J = torch.arange(1, 1001).flip(0)


@pytest.mark.parametrize("name, fn", [
    ("sqrt", lambda: torch.sqrt(I)),
    ("true division by a Python int", lambda: I / 7),
    ("exp", lambda: torch.exp(I)),
    ("log", lambda: torch.log(I)),
    ("sin", lambda: I.sin()),
    ("reciprocal", lambda: torch.reciprocal(I)),
    ("tensor / tensor", lambda: torch.div(I, J)),
    ("atan2", lambda: torch.atan2(I, J)),
    ("sqrt of a bool", lambda: torch.sqrt(I > 500)),
])
def test_integer_operands_with_a_floating_result_count_one_per_value(torchscan, name, fn):
    # One operation per float result value: 1,000, the same as on i.float().
    assert op_view(torchscan, fn) == 1000, name


def test_the_integer_count_equals_the_float_count(torchscan):
    for fn in (torch.sqrt, torch.exp, torch.log, torch.erf, torch.sigmoid, torch.tanh):
        assert op_view(torchscan, lambda: fn(I)) == op_view(torchscan, lambda: fn(I.float())) > 0, fn
    # xlogy(i, j): log + multiply + selection per value = 3 * 1,000.
    assert op_view(torchscan, lambda: torch.xlogy(I, J)) == 3000


def test_integer_arithmetic_and_integer_comparisons_stay_excluded(torchscan):
    # int + int, int * int, -int, int // int: integer results, integer arithmetic: 0.
    for fn in (lambda: I + J, lambda: I * J, lambda: -I, lambda: I // 7, lambda: torch.abs(I)):
        assert op_view(torchscan, fn) == 0
    # Comparisons of integers produce bool: integer arithmetic, 0.
    assert op_view(torchscan, lambda: I < J) == 0
    # A float scalar promotes (the existing scalar rule): i * 0.5 -> 1,000; i < 0.5 compares in float: 1,000.
    assert op_view(torchscan, lambda: I * 0.5) == 1000
    assert op_view(torchscan, lambda: I < 0.5) == 1000


def test_out_destinations_take_no_part_in_promotion(torchscan):
    f = torch.empty(1000)
    # sqrt promotes integers to float whatever the destination: 1,000 roots.
    assert op_view(torchscan, lambda: torch.sqrt(I, out=f)) == 1000
    # True division likewise: 1,000.
    assert op_view(torchscan, lambda: torch.div(I, 7, out=f)) == 1000
    # add of two int64 tensors computes in int64, then converts into f: 0.
    assert op_view(torchscan, lambda: torch.add(I, J, out=f)) == 0
    assert op_view(torchscan, lambda: torch.mul(I, J, out=f)) == 0
    # Floor division of integers stays integral whatever the destination: 0.
    assert op_view(torchscan, lambda: torch.div(I, J, rounding_mode="floor", out=f)) == 0
    # Special functions promote integers as exp does: one evaluation per value, 1,000.
    assert op_view(torchscan, lambda: torch.special.bessel_j0(I, out=f)) == 1000
    assert op_view(torchscan, lambda: torch.special.modified_bessel_i0(I, out=f)) == 1000


def test_in_place_float_results_of_integer_operands(torchscan):
    f = torch.ones(1000)
    # f /= i: a float divide per value, 1,000 (self is float: counted before and after).
    assert op_view(torchscan, lambda: f.div_(I)) == 1000
    # f.copy_(i.sqrt()): the root counts 1,000, the copy nothing.
    assert op_view(torchscan, lambda: f.copy_(I.sqrt())) == 1000


def test_module_view_counts_the_same_values(torchscan):
    # Pointwise module view: FLOPs as the operator view (1,000), no MACs,
    # 1,000 reads + 1,000 writes = 2,000 accesses.
    assert module_view(torchscan, lambda: torch.sqrt(I)) == (1000, 0, 2000)
    # i / 7: Python passes 7 as a 0-d tensor operand, one read more: (1000, 0, 2001).
    assert module_view(torchscan, lambda: I / 7) == (1000, 0, 2001)


def test_raft_style_normalisation_is_counted(torchscan):
    corr = torch.randn(1, 8, 8)
    # corr / sqrt(tensor(8)): one root of a 0-d int tensor (1) + 64 divides = 65.
    assert op_view(torchscan, lambda: corr / torch.sqrt(torch.tensor(8))) == 65


def test_foreach_lists_of_integers_follow_the_rule(torchscan):
    xs = [torch.arange(1, 11), torch.arange(1, 21)]
    # _foreach_sqrt on 10 + 20 int64 values with float results: 30 roots.
    assert op_view(torchscan, lambda: torch._foreach_sqrt(xs)) == 30
