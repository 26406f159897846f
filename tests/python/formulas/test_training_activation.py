"""torchscan_training_v1 activation, softmax and dropout backward rows on real ATen calls.

Each kernel is counted three ways: the backward operator called directly (every
overload), the same kernel reached through autograd of its forward, and, where
torch._decomp.decomposition_table holds the kernel, its decomposition run on the
same tensors (equal, or the documented difference asserted). Expected values are
the per-value counts derived in formulas/activation_backward.cc times N (grad_input
values), written out by hand per kernel.
"""
import pytest
import torch
import torch.nn.functional as F
from torch._decomp import decomposition_table

import torchscan

A = torch.ops.aten
SHAPE = (2, 3, 4)
N = 24  # values of a SHAPE tensor


def measure(fn):
    r = torchscan.measure_flops(fn)
    return r


def complete_total(r):
    assert r["total"]["status"] == "complete", r["diagnostics"]
    return r["total"]["value"]


def tensors():
    torch.manual_seed(0)
    g = torch.randn(SHAPE)
    x = torch.randn(SHAPE)
    return g, x


# (operator, argument builder from (g, x), count per grad_input value)
def _cases():
    return [
        ("threshold_backward", lambda g, x: (g, x, 0.0), 2),
        ("gelu_backward", lambda g, x: (g, x), 11),
        ("silu_backward", lambda g, x: (g, x), 9),
        ("sigmoid_backward", lambda g, x: (g, x.sigmoid()), 3),
        ("tanh_backward", lambda g, x: (g, x.tanh()), 3),
        ("hardtanh_backward", lambda g, x: (g, x, -1.0, 1.0), 3),
        ("hardshrink_backward", lambda g, x: (g, x, 0.5), 3),
        ("softshrink_backward", lambda g, x: (g, x, 0.5), 3),
        ("leaky_relu_backward", lambda g, x: (g, x, 0.01, False), 3),
        ("elu_backward", lambda g, x: (g, 1.0, 1.0, 1.0, False, x), 8),
        ("softplus_backward", lambda g, x: (g, x, 1.0, 20.0), 8),
        ("mish_backward", lambda g, x: (g, x), 18),
        ("hardswish_backward", lambda g, x: (g, x), 7),
        ("hardsigmoid_backward", lambda g, x: (g, x), 4),
        ("log_sigmoid_backward", lambda g, x: (g, x, torch.exp(-x.abs())), 8),
        ("logit_backward", lambda g, x: (g, torch.rand(SHAPE), None), 6),
        ("native_dropout_backward", lambda g, x: (g, torch.rand(SHAPE) > 0.5, 2.0), 2),
    ]


@pytest.mark.parametrize("name,build,per_value", _cases(), ids=[c[0] for c in _cases()])
def test_direct_call_counts_per_value(name, build, per_value):
    g, x = tensors()
    args = build(g, x)
    op = getattr(A, name).default
    r = measure(lambda: op(*args))
    assert r["by_operator"] == {f"aten.{name}": per_value * N}
    assert complete_total(r) == per_value * N
    assert r["diagnostics"] == []


def test_gelu_tanh_and_elu_from_result():
    g, x = tensors()
    # tanh approximation: 23 per value.
    assert measure(lambda: A.gelu_backward(g, x, approximate="tanh"))["by_operator"] == {"aten.gelu_backward": 23 * N}
    # ELU backward from its result: 6 per value.
    r = measure(lambda: A.elu_backward(g, 1.0, 1.0, 1.0, True, F.elu(x)))
    assert r["by_operator"]["aten.elu_backward"] == 6 * N


def test_prelu_kernel_backward_both_outputs():
    g, x = tensors()
    w = torch.rand(1, 3, 1)
    r = measure(lambda: A._prelu_kernel_backward(g, x, w))
    # One shared comparison, a multiply and a selection per output: 5 per value of the broadcast shape.
    assert r["by_operator"] == {"aten._prelu_kernel_backward": 5 * N}


def test_rrelu_with_noise_backward_training_and_eval():
    g, x = tensors()
    noise = torch.rand(SHAPE)
    train = measure(lambda: A.rrelu_with_noise_backward(g, x, noise, 0.1, 0.3, True, False))
    assert train["by_operator"] == {"aten.rrelu_with_noise_backward": 1 * N}  # grad * noise
    # eval runs leaky_relu_backward inside: counted once, by the outer row (3 per value).
    ev = measure(lambda: A.rrelu_with_noise_backward(g, x, noise, 0.1, 0.3, False, False))
    assert ev["by_operator"] == {"aten.rrelu_with_noise_backward": 3 * N}
    assert complete_total(ev) == 3 * N


def test_glu_backward_counts_per_half():
    _, x = tensors()  # (2,3,4) split along dim 2: halves of H = 2*3*2 = 12 values
    g = torch.randn(2, 3, 2)
    r = measure(lambda: A.glu_backward(g, x, 2))
    # Its inner sigmoid and mul_ are covered by the row: 9 * H only.
    assert r["by_operator"] == {"aten.glu_backward": 9 * 12}


@pytest.mark.parametrize("name", ["_softmax_backward_data", "_log_softmax_backward_data"])
def test_softmax_backward_is_four_n_minus_r(name):
    g, x = tensors()
    y = x.softmax(1) if name == "_softmax_backward_data" else x.log_softmax(1)
    op = getattr(A, name)
    # dim 1: rows R = 2*4 = 8 -> 4*24 - 8 = 88; dim -1: R = 6 -> 90.
    assert measure(lambda: op(g, y, 1, torch.float32))["by_operator"] == {f"aten.{name}": 4 * N - 8}
    assert measure(lambda: op(g, y, -1, torch.float32))["by_operator"] == {f"aten.{name}": 4 * N - 6}


def test_masked_softmax_backward():
    g, x = tensors()
    mask = torch.rand(SHAPE) > 0.7
    y = torch._masked_softmax(x, mask, 2)
    # 6N - R with R = 6 rows along the last dim: 144 - 6 = 138; dim 1: R = 8 -> 136.
    assert measure(lambda: A._masked_softmax_backward(g, y, mask, None))["by_operator"] == {
        "aten._masked_softmax_backward": 6 * N - 6
    }
    assert measure(lambda: A._masked_softmax_backward(g, y, mask, 1))["by_operator"] == {
        "aten._masked_softmax_backward": 6 * N - 8
    }


def test_out_overloads_count_like_the_functional_call():
    g, x = tensors()
    out = torch.empty(SHAPE)
    calls = {
        "threshold_backward": lambda: A.threshold_backward.grad_input(g, x, 0.0, grad_input=out),
        "gelu_backward": lambda: A.gelu_backward.grad_input(g, x, approximate="tanh", grad_input=out),
        "hardswish_backward": lambda: A.hardswish_backward.out(g, x, out=out),
        "elu_backward": lambda: A.elu_backward.grad_input(g, 1.0, 1.0, 1.0, False, x, grad_input=out),
        "native_dropout_backward": lambda: A.native_dropout_backward.out(g, x > 0, 2.0, out=out),
        "rrelu_with_noise_backward": lambda: A.rrelu_with_noise_backward.out(
            g, x, torch.rand(SHAPE), 0.1, 0.3, True, False, out=out),
        "_softmax_backward_data": lambda: A._softmax_backward_data.out(g, x.softmax(1), 1, torch.float32,
                                                                       grad_input=out),
        "logit_backward": lambda: A.logit_backward.grad_input(g, torch.rand(SHAPE), 1e-6, grad_input=out),
    }
    expected = {"threshold_backward": 2 * N, "gelu_backward": 23 * N, "hardswish_backward": 7 * N,
                "elu_backward": 8 * N, "native_dropout_backward": 2 * N, "rrelu_with_noise_backward": 1 * N,
                "_softmax_backward_data": 4 * N - 8, "logit_backward": 6 * N}
    for name, call in calls.items():
        r = measure(call)
        assert r["by_operator"][f"aten.{name}"] == expected[name], name


def _backward_count(forward, name, x=None, g=None):
    """Runs forward(x) then its backward with gradient g; returns the count of aten.<name>."""
    g0, x0 = tensors()
    x = (x0 if x is None else x).clone().requires_grad_()
    g = g0 if g is None else g

    def step():
        y = forward(x)
        y.backward(g)

    r = measure(step)
    # The backward kernel itself is counted (a forward without a row, such as
    # aten.logit, may still leave the total partial: not this family's row).
    assert not any(d.get("operator") == f"aten.{name}" for d in r["diagnostics"]), r["diagnostics"]
    return r["by_operator"].get(f"aten.{name}")


@pytest.mark.parametrize(
    "forward,name,per_value",
    [
        (F.relu, "threshold_backward", 2),
        (F.gelu, "gelu_backward", 11),
        (lambda t: F.gelu(t, approximate="tanh"), "gelu_backward", 23),
        (F.silu, "silu_backward", 9),
        (torch.sigmoid, "sigmoid_backward", 3),
        (torch.tanh, "tanh_backward", 3),
        (F.hardtanh, "hardtanh_backward", 3),
        (F.relu6, "hardtanh_backward", 3),
        (F.leaky_relu, "leaky_relu_backward", 3),
        (F.elu, "elu_backward", 8),
        (lambda t: F.elu(t * 1.0, inplace=True), "elu_backward", 6),  # in-place: backward from the result
        (F.celu, "elu_backward", 8),
        (F.selu, "elu_backward", 8),
        (F.softplus, "softplus_backward", 8),
        (F.mish, "mish_backward", 18),
        (F.hardswish, "hardswish_backward", 7),
        (F.hardsigmoid, "hardsigmoid_backward", 4),
        (F.logsigmoid, "log_sigmoid_backward", 8),
        (F.softshrink, "softshrink_backward", 3),
        (F.hardshrink, "hardshrink_backward", 3),
        (lambda t: torch.logit(t.sigmoid(), eps=1e-6), "logit_backward", 6),
        (lambda t: F.rrelu(t, training=True), "rrelu_with_noise_backward", 1),
        (lambda t: F.rrelu(t, training=False), "rrelu_with_noise_backward", 3),
        # On CPU F.dropout composes bernoulli_ and mul (its backward is a mul);
        # native_dropout (CUDA's path, traced graphs) is the kernel with this backward.
        (lambda t: A.native_dropout(t, 0.5, True)[0], "native_dropout_backward", 2),
    ],
    ids=lambda v: v if isinstance(v, (str, int)) else None,
)
def test_autograd_reaches_the_counted_kernel(forward, name, per_value):
    assert _backward_count(forward, name) == per_value * N


def test_autograd_prelu_glu_softmax():
    weight = torch.rand(3, requires_grad=True)
    assert _backward_count(lambda t: F.prelu(t, weight), "_prelu_kernel_backward") == 5 * N
    g_half = torch.randn(2, 3, 2)
    assert _backward_count(lambda t: F.glu(t, -1), "glu_backward", g=g_half) == 9 * 12
    assert _backward_count(lambda t: t.softmax(-1), "_softmax_backward_data") == 4 * N - 6
    assert _backward_count(lambda t: t.log_softmax(1), "_log_softmax_backward_data") == 4 * N - 8
    mask = torch.rand(SHAPE) > 0.7
    assert _backward_count(lambda t: torch._masked_softmax(t, mask, 2), "_masked_softmax_backward") == 6 * N - 6


# Decomposition comparison: (operator, args builder, per-value difference decomposition - kernel).
#   mish +5: the decomposition calls softplus (its forward row, 7) where the kernel
#            computes log1p(exp(x)) (2).
#   log_sigmoid -2: the decomposition builds its two selections as int64 where() calls
#                   (integer arithmetic is excluded); the kernel selects in floating point.
#   _prelu_kernel_backward +1: the decomposition compares self > 0 once per output;
#                              the kernel shares one comparison.
DECOMPOSITIONS = [
    ("threshold_backward", lambda g, x: (g, x, 0.0), 0),
    ("gelu_backward", lambda g, x: (g, x), 0),
    ("silu_backward", lambda g, x: (g, x), 0),
    ("sigmoid_backward", lambda g, x: (g, x.sigmoid()), 0),
    ("tanh_backward", lambda g, x: (g, x.tanh()), 0),
    ("hardtanh_backward", lambda g, x: (g, x, -1.0, 1.0), 0),
    ("leaky_relu_backward", lambda g, x: (g, x, 0.01, False), 0),
    ("elu_backward", lambda g, x: (g, 1.0, 1.0, 1.0, False, x), 0),
    ("softplus_backward", lambda g, x: (g, x, 1.0, 20.0), 0),
    ("mish_backward", lambda g, x: (g, x), 5),
    ("hardswish_backward", lambda g, x: (g, x), 0),
    ("hardsigmoid_backward", lambda g, x: (g, x), 0),
    ("log_sigmoid_backward", lambda g, x: (g, x, torch.exp(-x.abs())), -2),
    ("_prelu_kernel_backward", lambda g, x: (g, x, torch.rand(1, 3, 1)), 1),
    ("rrelu_with_noise_backward", lambda g, x: (g, x, torch.rand(SHAPE), 0.1, 0.3, True, False), 0),
    ("native_dropout_backward", lambda g, x: (g, torch.rand(SHAPE) > 0.5, 2.0), 0),
    ("logit_backward", lambda g, x: (g, torch.rand(SHAPE), None), 0),
]


@pytest.mark.parametrize("name,build,diff", DECOMPOSITIONS, ids=[c[0] for c in DECOMPOSITIONS])
def test_decomposition_matches_or_differs_as_documented(name, build, diff):
    g, x = tensors()
    args = build(g, x)
    op = getattr(A, name).default
    kernel = complete_total(measure(lambda: op(*args)))
    decomposed = complete_total(measure(lambda: decomposition_table[op](*args)))
    assert decomposed - kernel == diff * N


def test_decomposition_variants_with_options():
    g, x = tensors()
    pairs = [
        (A.gelu_backward.default, (g, x), {"approximate": "tanh"}),
        (A.elu_backward.default, (g, 1.0, 1.0, 1.0, True, F.elu(x)), {}),
        (A.rrelu_with_noise_backward.default, (g, x, torch.rand(SHAPE), 0.1, 0.3, False, False), {}),
        (A.logit_backward.default, (g, torch.rand(SHAPE), 1e-6), {}),
        (A._softmax_backward_data.default, (g, x.softmax(1), 1, torch.float32), {}),
        (A._log_softmax_backward_data.default, (g, x.log_softmax(-1), -1, torch.float32), {}),
    ]
    for op, args, kwargs in pairs:
        kernel = complete_total(measure(lambda: op(*args, **kwargs)))
        decomposed = complete_total(measure(lambda: decomposition_table[op](*args, **kwargs)))
        assert decomposed == kernel, op
    gg = torch.randn(2, 3, 2)
    assert complete_total(measure(lambda: decomposition_table[A.glu_backward.default](gg, x, 2))) == 9 * 12


def test_dtypes_reduced_precision_counted_complex_unavailable():
    g, x = tensors()
    gb, xb = g.bfloat16(), x.bfloat16()
    assert measure(lambda: A.silu_backward(gb, xb))["by_operator"] == {"aten.silu_backward": 9 * N}
    gc, yc = torch.randn(SHAPE, dtype=torch.cfloat), torch.randn(SHAPE, dtype=torch.cfloat)
    r = measure(lambda: A.sigmoid_backward(gc, yc))
    assert r["total"]["status"] != "complete"
    assert any("sigmoid_backward" in str(d) for d in r["diagnostics"])
