"""The rows the operator sweep (test_operator_sweep.py) found missing, on real
ATen calls. Each expected value is derived by hand in the comment beside it
(formulas/elementwise.h, formulas/misc.h and formulas/registry.cc state the
expansions)."""


import pytest
import torch

X = torch.rand(3, 4) + 0.5  # 12 values in (0.5, 1.5)
Y = torch.rand(3, 4) + 0.5
CENTRED, HALF, SHIFTED = X - 1, X / 2, X + 1  # (the lambdas below run one operator each)
WEIGHTS = torch.rand(3)
ROWS, THETA = torch.tensor([0, 2]), torch.rand(1, 2, 3)
FLAT, LENGTHS = X.flatten(), torch.tensor([5, 7])


def op_view(torchscan, fn):
    report = torchscan.measure_flops(fn)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    return report["total"]["value"]


@pytest.mark.parametrize("name, fn, expected", [
    # One per value (exp/log/erf-like functions, selections): 12.
    ("angle", lambda: torch.angle(CENTRED), 12),
    ("deg2rad", lambda: torch.deg2rad(X), 12),
    ("lgamma", lambda: torch.lgamma(X), 12),
    ("digamma", lambda: torch.digamma(X), 12),
    ("i0", lambda: torch.special.i0(X), 12),
    ("bessel_j0", lambda: torch.special.bessel_j0(X), 12),
    ("igamma", lambda: torch.igamma(X, Y), 12),
    ("heaviside", lambda: torch.heaviside(CENTRED, Y), 12),
    # nan_to_num: three tests with their selections: 36.
    ("nan_to_num", lambda: torch.nan_to_num(X), 36),
    # sinc: pi*x, sin, divide, the x == 0 selection: 48.
    ("sinc", lambda: torch.sinc(X), 48),
    # logaddexp: max, a - b, |.|, negate, exp, log1p, add: 7 * 12 = 84; base 2 scales by 1/ln 2: 96.
    ("logaddexp", lambda: torch.logaddexp(X, Y), 84),
    ("logaddexp2", lambda: torch.logaddexp2(X, Y), 96),
    # logit: x/(1 - x) and log: 3 * 12 = 36; with eps the clamp adds 2: 60.
    ("logit", lambda: torch.logit(HALF), 36),
    ("logit eps", lambda: torch.logit(HALF, eps=1e-6), 60),
    # mvlgamma p = 2: 3p = 6 per value: 72 (x > (p - 1)/2 = 0.5 holds).
    ("mvlgamma", lambda: torch.mvlgamma(SHIFTED, 2), 72),
    # entr: log, multiply, negate, selection: 48; xlog1py as xlogy: 36.
    ("entr", lambda: torch.special.entr(X), 48),
    ("xlog1py", lambda: torch.special.xlog1py(X, Y), 36),
    # equal: one comparison per value: 12; count_nonzero likewise: 12.
    ("equal", lambda: torch.equal(X, Y), 12),
    ("count_nonzero", lambda: torch.count_nonzero(X), 12),
    # allclose: isclose 7 per value + all() over 12: 8*12 - 1 = 95.
    ("allclose", lambda: torch.allclose(X, Y), 95),
    # dist: difference, |.|, power per value (36) + 11 adds + 1 root = 48 = 4 * 12.
    ("dist", lambda: torch.dist(X, Y), 48),
    # trace of (3, 4): 3 diagonal values, 2 adds.
    ("trace", lambda: torch.trace(X), 2),
    # cummax along dim 1: 3 rows x 3 comparisons = 9; logcumsumexp: 7 per step: 63.
    ("cummax", lambda: torch.cummax(X, 1), 9),
    ("logcumsumexp", lambda: torch.logcumsumexp(X, 1), 63),
    # bincount of integers: 0; with 3 float weights: 3 adds.
    ("bincount", lambda: torch.bincount(torch.tensor([0, 1, 1])), 0),
    ("bincount weights", lambda: torch.bincount(torch.tensor([0, 1, 1]), WEIGHTS), 3),
    # Windows of 8 values: hann 4 per value = 32; blackman 8 per value = 64.
    ("hann_window", lambda: torch.hann_window(8), 32),
    ("blackman_window", lambda: torch.blackman_window(8), 64),
    ("kaiser_window", lambda: torch.kaiser_window(8), 64),
    # index_add of a (2, 4) source: 8 adds; alpha = 2 adds 8 multiplies: 16.
    ("index_add", lambda: torch.index_add(X, 0, ROWS, Y[:2]), 8),
    ("index_add alpha", lambda: torch.index_add(X, 0, ROWS, Y[:2], alpha=2), 16),
    # index_reduce "prod": 8 combines; "mean" adds a divide per output value (12): 20.
    ("index_reduce", lambda: X.index_reduce(0, ROWS, Y[:2], "prod"), 8),
    ("index_reduce mean", lambda: X.index_reduce(0, ROWS, Y[:2], "mean"), 20),
    # affine_grid (1, 4, 5): 20 locations x 2 coordinates, 3-term dots: 40 * 6 = 240,
    # base grid linspaces 2*4 + 2 and 2*5 + 2: 22 -> 262.
    ("affine_grid", lambda: torch.nn.functional.affine_grid(THETA, (1, 2, 4, 5), align_corners=False), 262),
    # renorm of 3 rows of m = 4 along dim 0: per row a 2-norm (4 squares, 3 adds, a root: 8),
    # the factor (4) and 4 multiplies: 3 x 16 = 48; the 1-norm (|.| 4 + 3 adds = 7): 3 x 15 = 45.
    ("renorm", lambda: torch.renorm(X, 2, 0, 1.0), 48),
    ("renorm p=1", lambda: torch.renorm(X, 1, 0, 1.0), 45),
    # segment_reduce of 12 values in segments of 5 and 7: "sum" combines every value
    # into its segment's start value: 12; "max" adds a NaN test each: 24; "mean" 12 + 2 divides.
    ("segment_reduce", lambda: torch.segment_reduce(FLAT, "sum", lengths=LENGTHS), 12),
    ("segment_reduce max", lambda: torch.segment_reduce(FLAT, "max", lengths=LENGTHS), 24),
    ("segment_reduce mean", lambda: torch.segment_reduce(FLAT, "mean", lengths=LENGTHS), 14),
    # Integer-only arithmetic: zero.
    ("gcd", lambda: torch.gcd(ROWS, ROWS + 1), 0),
    ("shift", lambda: ROWS << 1, 0),
    # Copies and index lists: zero.
    ("index_fill", lambda: X.index_fill(0, ROWS, 1.0), 0),
    ("diag_embed", lambda: torch.diag_embed(X), 0),
    ("block_diag", lambda: torch.block_diag(X, Y), 0),
    ("rot90", lambda: torch.rot90(X), 0),
    ("take", lambda: torch.take(X, torch.tensor([0, 5])), 0),
    ("tril_indices", lambda: torch.tril_indices(4, 4), 0),
])
def test_sweep_rows(torchscan, name, fn, expected):
    assert op_view(torchscan, fn) == expected, name


def test_factorizations_are_stated_exclusions_never_zero(torchscan):
    a = torch.rand(4, 4) + 4 * torch.eye(4)
    fns = [lambda: torch.linalg.inv(a), lambda: torch.linalg.det(a), lambda: torch.linalg.svd(a),
           lambda: torch.linalg.pinv(a), lambda: torch.linalg.cholesky(a @ a.T)]
    # torch 2.14 on: polar decomposition and Hermitian square root (their own kernels).
    if hasattr(torch.linalg, "polar"):
        fns.append(lambda: torch.linalg.polar(a))
    if hasattr(torch.linalg, "matrix_sqrth"):
        fns.append(lambda: torch.linalg.matrix_sqrth(a @ a.T))
    for fn in fns:
        report = torchscan.measure_flops(fn)
        assert report["total"]["status"] == "partial"
        assert any(d["code"] == "excluded_operator" for d in report["diagnostics"]), report["diagnostics"]


def test_shallow_copy_data_is_metadata(torchscan):
    # torch 2.14 on: self takes source's data (storage and metadata), no values move.
    if not hasattr(torch.ops.aten, "shallow_copy_data_"):
        pytest.skip(f"torch {torch.__version__} has no aten::shallow_copy_data_")
    a, b = torch.zeros(3), torch.ones(3)
    report = torchscan.measure_flops(lambda: torch.ops.aten.shallow_copy_data_(a, b))
    assert torch.equal(a, b)
    assert report["total"]["status"] == "complete" and report["total"]["value"] == 0, report["diagnostics"]
    assert report["ignored_operators"]["aten.shallow_copy_data_"]["reason"] == "metadata", report["ignored_operators"]
