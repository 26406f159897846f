"""Custom module handlers and the operator view: a handler's own tensor work is
never counted, and a handler completes the module view of a custom kernel the
built-in formulas cannot see into (an einops-style block).

Expected values are derived by hand in the comments, with the module view's
conventions (tests/fixtures/custom_handlers.py).
"""

import pytest
import torch
from torch import nn

import torchscan
from tests.fixtures.custom_handlers import Block, METRICS, check_readers, crawl, row, value


# ---------------------------------------------------------------- suspension and the operator view


def test_handler_tensor_work_is_never_counted():
    def busy(module, args, kwargs, output):
        # Natively 2 * 64^3 = 524,288 FLOPs if it were counted.
        a = torch.ones(64, 64)
        (a @ a).sum()
        torch.nn.functional.linear(args[0], torch.ones(8, args[0].shape[-1]))
        return {}

    native, report = crawl(), crawl({Block: busy, nn.Linear: busy})
    assert not [d for d in report["diagnostics"] if d["code"].startswith("custom_")]
    # Operator view by hand: addmm 2*1*4*8 + 2*1*8*4 + 2*1*4*2 = 64 + 64 + 16 = 144.
    assert report["operator_flops"]["total"]["value"] == 144
    assert report["operator_flops"] == native["operator_flops"]
    assert report["totals"] == native["totals"]
    for a, b in zip(report["layers"], native["layers"]):
        assert a["metrics"] == b["metrics"]


# ---------------------------------------------------------------- an einops-style block


_OPS = {}


@pytest.fixture(scope="module", autouse=True)
def token_mix_op():
    """A custom kernel, defined for this module's tests and removed after
    them: the coverage audit (tests/python/tools/test_coverage_audit.py) classifies
    every operator registered in the process, and must not see it."""

    @torch.library.custom_op("torchscan_handlers_test::token_mix", mutates_args=())
    def token_mix(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """out[b, m, c] = sum_n x[b, n, c] * w[n, m]: a custom kernel the module view has no formula for."""
        return torch.einsum("bnc,nm->bmc", x, w)

    @token_mix.register_fake
    def _(x, w):
        return x.new_empty(x.shape[0], w.shape[1], x.shape[2])

    _OPS["token_mix"] = token_mix
    yield token_mix
    _OPS.clear()
    token_mix._lib._destroy()


class TokenMix(nn.Module):
    """'b (h w) c -> b (w h) c' (einops.rearrange by reshape/transpose), then
    a token-mixing custom kernel."""

    def __init__(self, tokens=4):
        super().__init__()
        self.w = nn.Parameter(torch.ones(tokens, tokens))

    def forward(self, x):
        b, n, c = x.shape
        y = x.reshape(b, 2, n // 2, c).transpose(1, 2).reshape(b, n, c)
        return _OPS["token_mix"](y, self.w)


class MixerNet(nn.Module):
    """On (1, 4, 4): embed is a Linear(4, 4) on 4 rows: 16 outputs * (4 + 3 + 1)
    = 128 FLOPs, 64 MACs, DMAs 16 + (16 + 4) + 16 = 52."""

    def __init__(self):
        super().__init__()
        self.embed, self.mix = nn.Linear(4, 4), TokenMix()

    def forward(self, x):
        return self.mix(self.embed(x))


def token_mix_cost(module, args, kwargs, output):
    """16 outputs of 4-term dots over tokens: 16 * (4 + 3) = 112 FLOPs, 16 * 4
    = 64 MACs; DMAs: 16 input reads + 16 weight reads + 16 output writes = 48.
    The rearrange is a copy: no arithmetic."""
    b, n, c = output.shape
    k = module.w.shape[0]
    return {"module_flops": b * n * c * (2 * k - 1), "macs": b * n * c * k,
            "dmas": args[0].numel() + module.w.numel() + output.numel()}


# The operator view's own caller formula for the same kernel (FlopCounterMode
# convention, 2 per multiply-add): 2 * 16 * 4 = 128.
def operator_mapping():
    return {torch.ops.torchscan_handlers_test.token_mix: lambda x, w, out_shape: 2 * 16 * 4}


def test_einops_style_block_is_partial_and_named_without_a_handler():
    torch.manual_seed(0)
    report = torchscan.crawl_module(MixerNet(), (4, 4), custom_mapping=operator_mapping())
    for m in METRICS:
        assert report["totals"][m]["status"] == "partial"
        assert row(report, "mix")["metrics"][m]["status"] == "partial"
        assert row(report, "embed")["metrics"][m]["status"] == "complete"
    assert report["totals"]["module_flops"]["known_value"] >= 128  # embed's part at least
    named = [d for d in report["diagnostics"] if d["code"] == "uncounted_operator" and d["metric"] == "module_flops"]
    assert [d["operator"] for d in named] == ["torchscan_handlers_test.token_mix"]
    # custom_mapping completes the operator view only: 128 (embed) + 128 (token_mix).
    assert report["totals"]["operator_flops"]["value"] == 256
    with pytest.raises(RuntimeError, match="module_flops, macs, dmas incomplete"):
        torchscan.crawl_module(MixerNet(), (4, 4), custom_mapping=operator_mapping(), strict=True)


def test_einops_style_block_is_complete_with_a_handler():
    torch.manual_seed(0)
    without = torchscan.crawl_module(MixerNet(), (4, 4), custom_mapping=operator_mapping())
    torch.manual_seed(0)
    report = torchscan.crawl_module(MixerNet(), (4, 4), custom_mapping=operator_mapping(),
                                    custom_modules={TokenMix: token_mix_cost}, strict=True)
    assert [value(report, "mix", m) for m in METRICS] == [112, 64, 48]
    # Totals: 128 + 112 = 240 FLOPs, 64 + 64 = 128 MACs, 52 + 48 = 100 DMAs.
    assert [report["totals"][m]["value"] for m in METRICS] == [240, 128, 100]
    # The module view's gap diagnostics for token_mix no longer hold; the
    # operator view (its own custom_mapping) is unchanged.
    assert not [d for d in report["diagnostics"] if d.get("metric") in METRICS]
    assert report["operator_flops"] == without["operator_flops"]
    assert report["totals"]["operator_flops"] == without["totals"]["operator_flops"]
    check_readers(report)


def test_operator_view_keeps_its_gap_without_custom_mapping():
    torch.manual_seed(0)
    report = torchscan.crawl_module(MixerNet(), (4, 4), custom_modules={TokenMix: token_mix_cost})
    # Module handlers supply no operator estimates.
    assert report["totals"]["module_flops"]["value"] == 240
    assert report["totals"]["operator_flops"]["status"] == "partial"
    assert [d["operator"] for d in report["diagnostics"] if d["code"] == "uncounted_operator"] == [
        "torchscan_handlers_test.token_mix"]
