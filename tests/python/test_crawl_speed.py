"""crawl_module's speed work (issue 10 item 19) changes no result: the
mobile fixtures are the published architectures, every layer call of them
gets its row with the output the forward produced, and the cyclic GC that
crawl_module pauses comes back exactly as it was. Timings are in
tools/benchmark.py (part d), never asserted here."""

import gc

import pytest
import torch
import torch.nn as nn

import torchscan
from tests.fixtures.models import efficientnet_b0, mobilenet_v3_small


@pytest.mark.parametrize("build, expected", [
    # torchvision's documented parameter counts (torchvision.models docs,
    # "num_params" of MobileNet_V3_Small_Weights.IMAGENET1K_V1 and
    # EfficientNet_B0_Weights.IMAGENET1K_V1): same channel tables, SE
    # squeeze widths and classifier heads.
    (mobilenet_v3_small, 2_542_856),
    (efficientnet_b0, 5_288_548),
])
def test_mobile_fixtures_match_published_parameter_counts(build, expected):
    assert sum(p.numel() for p in build().parameters()) == expected


@pytest.mark.parametrize("build", [mobilenet_v3_small, efficientnet_b0])
def test_every_layer_call_has_its_row_and_output(build):
    torch.manual_seed(0)
    model = build().eval()
    x = torch.rand(1, 3, 224, 224)
    names = {m: n for n, m in model.named_modules()}
    seen = []  # (path, output shape) per module call, in call order

    def record(mod, args, output):
        seen.append((names[mod], list(output.shape)))

    handle = nn.modules.module.register_module_forward_hook(record)
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()

    report = torchscan.crawl_module(model, args=(x,))
    rows = [(layer["path"], layer["output"]["shape"]) for layer in report["layers"]]
    # The hook sees calls as they finish (children first), the report lists
    # them as they start: the same calls in another order.
    assert sorted(rows) == sorted(seen)
    assert len(rows) == sum(1 for _ in model.modules())  # every module runs once
    assert report["totals"]["module_flops"]["status"] == "complete"
    # The stem convolution (3x3, stride 2, padding 1) sees 3 input positions per
    # output position on each spatial axis, from its output's identity.
    stem = next(layer for layer in report["layers"] if layer["path"] == "features.0.0")
    assert stem["metrics"]["receptive_field"]["status"] == "complete"
    assert stem["metrics"]["receptive_field"]["value"] == 3


class _GcProbe(nn.Module):
    def __init__(self, fail=False):
        super().__init__()
        self.fail = fail
        self.enabled_during_forward = None

    def forward(self, x):
        self.enabled_during_forward = gc.isenabled()
        if self.fail:
            raise ValueError("probe failure")
        return x + 1


@pytest.mark.parametrize("enabled_before", [True, False])
@pytest.mark.parametrize("fail", [False, True])
def test_gc_paused_during_the_crawl_and_restored(enabled_before, fail):
    probe = _GcProbe(fail)
    was = gc.isenabled()
    try:
        gc.enable() if enabled_before else gc.disable()
        if fail:
            with pytest.raises(ValueError, match="probe failure"):
                torchscan.crawl_module(probe, (4,))
        else:
            torchscan.crawl_module(probe, (4,))
        assert probe.enabled_during_forward is False
        assert gc.isenabled() is enabled_before
    finally:
        gc.enable() if was else gc.disable()
