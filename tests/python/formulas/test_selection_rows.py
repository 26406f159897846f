"""Computing factories, histc/embedding_bag/unique/check-only rows, and the
torchscan_selection_v1 table (formulas/CONVENTIONS.md) on real ATen calls.
Each expected value is derived by hand in the comment beside it."""

import torch
import torch.nn.functional as F

from conftest import module_view_totals as module_view


def op_view(torchscan, fn):
    report = torchscan.measure_flops(fn)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    return report


def total(torchscan, fn):
    return op_view(torchscan, fn)["total"]["value"]


X = torch.randn(4, 8)  # 4 slices of n = 8 along the last dim; ceil(log2 8) = 3


# ---- factories


def test_factories_that_compute_their_values(torchscan):
    # linspace N = 11: step once (2) + 2 per value = 24; N = 1: a fill, 0.
    assert op_view(torchscan, lambda: torch.linspace(0, 1, 11))["by_operator"] == {"aten.linspace": 24}
    assert total(torchscan, lambda: torch.linspace(0, 1, 1)) == 0
    # An integer result is computed with a double step: still 2*5 + 2 = 12.
    assert total(torchscan, lambda: torch.linspace(0, 8, 5, dtype=torch.int64)) == 12
    # logspace N = 5: 3 per value (multiply, add, power) + 2 = 17.
    assert op_view(torchscan, lambda: torch.logspace(0, 2, 5))["by_operator"] == {"aten.logspace": 17}
    # arange with a float step: 10 values start + i*step: 20.
    assert total(torchscan, lambda: torch.arange(0, 1, 0.1)) == 20
    # A float dtype computes in float: 2*6 = 12; integer positions are integer arithmetic: 0.
    assert total(torchscan, lambda: torch.arange(6, dtype=torch.float32)) == 12
    assert total(torchscan, lambda: torch.arange(6)) == 0
    # Module view: no operands, N values written: linspace (24, 0, 11).
    assert module_view(torchscan, lambda: torch.linspace(0, 1, 11)) == (24, 0, 11)


def test_like_factories_follow_their_base(torchscan):
    x = torch.randn(3, 4)
    # Fills write constants: 0 FLOPs, complete.
    for fn in (lambda: torch.zeros_like(x), lambda: torch.ones_like(x), lambda: torch.full_like(x, 2.0),
               lambda: torch.empty_like(x), lambda: x.new_full((2,), 1.0)):
        assert total(torchscan, fn) == 0
    # Random ones are random sampling: never zero, never complete.
    report = torchscan.measure_flops(lambda: torch.rand_like(x))
    assert report["total"]["status"] != "complete"
    assert any(d["code"] == "random_sampling" for d in report["diagnostics"])


# ---- histc, embedding_bag, check-only linalg


def test_histc(torchscan):
    x = torch.rand(100)
    # 100 values x 6 (2 range tests, sub/mul/div, 1 add) + 5 edges x 2 + 2 = 612.
    assert op_view(torchscan, lambda: torch.histc(x, bins=4, min=0, max=1))["by_operator"] == {"aten.histc": 612}
    # min == max: the range is the data's min and max, 2 * 99 more: 810.
    assert total(torchscan, lambda: torch.histc(x, bins=4)) == 810


def test_embedding_bag_forward_only_has_the_embedding_bag_row(torchscan):
    weight, ids = torch.randn(10, 4), torch.tensor([[1, 2, 3], [4, 5, 6]])
    # Two bags of 3 lookups, d = 4: (6 - 2) * 4 = 16 adds ("sum");
    # "mean" adds one divide per output value: 16 + 2*4 = 24.
    report = op_view(torchscan, lambda: F.embedding_bag(ids, weight, mode="sum"))
    assert report["total"]["value"] == 16
    assert "aten._embedding_bag_forward_only" in report["by_operator"]
    assert total(torchscan, lambda: F.embedding_bag(ids, weight, mode="mean")) == 24


def test_linalg_error_checks_cost_nothing(torchscan):
    a = torch.randn(3, 3) + 3 * torch.eye(3)
    for fn in (lambda: torch.linalg.inv(a), lambda: torch.linalg.solve(a, torch.randn(3))):
        report = torchscan.measure_flops(fn)
        assert "aten._linalg_check_errors" in report["ignored_operators"], report["ignored_operators"]
        for d in report["diagnostics"]:
            assert d.get("operator") != "aten._linalg_check_errors", d


# ---- torchscan_selection_v1


def test_sorting_rows(torchscan):
    # sort: 4 slices x 8*3 = 96.
    assert op_view(torchscan, lambda: torch.sort(X))["by_operator"] == {"aten.sort": 96}
    assert total(torchscan, lambda: torch.argsort(X, descending=True)) == 96
    # msort sorts along dim 0: 8 slices of 4 values, 4*2 each: 64.
    assert total(torchscan, lambda: torch.msort(X)) == 64
    # stable sort along dim 0: the same 64.
    assert total(torchscan, lambda: torch.sort(X, dim=0, stable=True)) == 64
    # Integer values: integer comparisons, 0 (complete).
    assert total(torchscan, lambda: torch.sort(torch.arange(8).flip(0))) == 0


def test_selection_rows(torchscan):
    # topk k = 3: 4 x 8*ceil(log2 3) = 4 x 16 = 64; k = 1: 4 x 7 = 28.
    assert op_view(torchscan, lambda: torch.topk(X, 3))["by_operator"] == {"aten.topk": 64}
    assert total(torchscan, lambda: torch.topk(X, 1)) == 28
    # kthvalue: quickselect 2(n - 1) = 14 per slice: 56.
    assert total(torchscan, lambda: torch.kthvalue(X, 3)) == 56
    # median(): the whole 32 values: 2*31 = 62; along dim 1: 4 x 14 = 56.
    assert total(torchscan, lambda: torch.median(X)) == 62
    assert total(torchscan, lambda: torch.median(X, dim=1)) == 56
    # nanmedian adds a NaN test per value: 62 + 32 = 94.
    assert total(torchscan, lambda: torch.nanmedian(X)) == 94
    # mode: sort (24) + neighbours (7) per slice: 4 x 31 = 124.
    assert total(torchscan, lambda: torch.mode(X, 1)) == 124


def test_unique_rows(torchscan):
    v = torch.tensor([3.0, 1.0, 2.0, 3.0, 1.0, 5.0, 4.0, 2.0])
    # torch.unique -> _unique2 over 8 values: 8*3 + 7 = 31 (inverse and counts are bookkeeping).
    report = op_view(torchscan, lambda: torch.unique(v, return_inverse=True, return_counts=True))
    assert report["by_operator"] == {"aten._unique2": 31}
    # unique_consecutive: neighbours only, 7.
    assert total(torchscan, lambda: torch.unique_consecutive(v)) == 7
    # unique over rows (dim=0) of X: r = 4 rows of d = 8: (4*2 + 3) * 8 = 88.
    assert total(torchscan, lambda: torch.unique(X, dim=0)) == 88
    # Integer labels (batched NMS's class ids): integer comparisons, 0 and complete.
    assert total(torchscan, lambda: torch.unique(torch.tensor([2, 0, 2, 1]))) == 0


def test_binary_search_rows(torchscan):
    seq, values = torch.linspace(0, 1, 10), torch.rand(5)
    # 5 queries x ceil(log2(10 + 1)) = 5 x 4 = 20.
    assert op_view(torchscan, lambda: torch.searchsorted(seq, values))["by_operator"] == {"aten.searchsorted": 20}
    assert op_view(torchscan, lambda: torch.bucketize(values, seq))["by_operator"] == {"aten.bucketize": 20}


def test_selection_module_view(torchscan):
    # sort: FLOPs 96, no MACs; reads 32 values, writes 32 values + 32 indices: 96.
    assert module_view(torchscan, lambda: torch.sort(X)) == (96, 0, 96)
    # topk k = 3: 64 FLOPs; reads 32, writes 12 values + 12 indices: 56.
    assert module_view(torchscan, lambda: torch.topk(X, 3)) == (64, 0, 56)


def test_reports_name_the_selection_table(torchscan):
    report = torchscan.measure_flops(lambda: torch.sort(X))
    assert "torchscan_selection_v1" in report["context"]["counting_convention"]
    with torchscan.scan(modules=True) as s:
        torch.sort(X)
    assert "torchscan_selection_v1" in s.module_report()["context"]["counting_convention"]
