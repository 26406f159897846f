"""The model zoo, no downloads: every report validates against the schema,
serializes, holds no tensor values and is identical across runs; totals are
checked against independently derived numbers where one exists."""

import json

import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.fixtures.models import RESNET50_PARAMETERS, resnet50

METRIC_KEYS = {"status", "value", "known_value", "unit", "scope", "method"}
LAYER_METRICS = {"module_flops", "macs", "dmas", "receptive_field", "effective_stride", "effective_padding"}
TOTALS = {"parameters", "trainable_parameters", "frozen_parameters", "parameter_bytes", "buffer_elements",
          "buffer_bytes", "module_flops", "macs", "dmas", "operator_flops"}


def check_metric(m):
    # Receptive-field results may carry the additive per-axis "axes" and an
    # unavailable result's "reason" (README, receptive fields).
    assert METRIC_KEYS <= set(m) <= METRIC_KEYS | ({"axes", "reason"} if m.get("unit") == "positions" else set()), m
    assert m["status"] in ("complete", "partial", "unavailable")
    if m["status"] == "complete":
        assert m["value"] is not None and m["value"] == m["known_value"]
    elif m["status"] == "partial":
        assert m["value"] is None and m["known_value"] is not None
    else:
        assert m["value"] is None and m["known_value"] is None


def validate(report):
    """The AnalysisReport schema (report schema reference), field by field."""
    assert report["schema_version"] == 1
    assert set(report) == {"schema_version", "context", "inputs", "layers", "totals", "operator_flops", "diagnostics"}
    assert {"torchscan_version", "torch_version", "python_version", "model_type", "execution_mode",
            "training_before", "devices", "dtypes"} <= set(report["context"])
    assert report["inputs"]["source"] in ("generated", "caller")
    assert set(report["totals"]) == TOTALS
    for name in ("module_flops", "macs", "dmas", "operator_flops"):
        check_metric(report["totals"][name])
    for layer in report["layers"]:
        assert {"path", "call_index", "name", "depth", "type", "inputs", "output", "parameters",
                "buffers", "metrics"} <= set(layer)
        assert set(layer["metrics"]) == LAYER_METRICS
        for m in layer["metrics"].values():
            check_metric(m)
    flops = report["operator_flops"]
    assert {"schema_version", "context", "total", "by_module", "by_operator", "ignored_operators",
            "diagnostics"} <= set(flops)
    for d in report["diagnostics"]:
        assert {"code", "severity", "metric", "message"} <= set(d) and d["severity"] in ("warning", "error")
    text = json.dumps(report)
    assert "tensor(" not in text
    return report


def crawl_twice(torchscan, model, *args, **kwargs):
    first = validate(torchscan.crawl_module(model, *args, **kwargs))
    assert torchscan.crawl_module(model, *args, **kwargs) == first
    return first


def complete(report, *names):
    for name in names:
        assert report["totals"][name]["status"] == "complete", (name, report["diagnostics"])


def test_resnet50(torchscan):
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = resnet50().eval()
    x = torch.randn(1, 3, 64, 64)
    report = crawl_twice(torchscan, model, args=(x,))
    # torchvision's published parameter count for ResNet-50.
    assert report["totals"]["parameters"] == RESNET50_PARAMETERS
    complete(report, "module_flops", "macs", "dmas", "operator_flops")
    # Independent: FlopCounterMode counts exactly the convolutions and the fc (2 per MAC),
    # so the conv and linear layers' MACs add up to half its total.
    with FlopCounterMode(display=False) as fcm, torch.no_grad():
        model(x)
    dot_macs = sum(l["metrics"]["macs"]["value"] for l in report["layers"] if l["type"] in ("Conv2d", "Linear"))
    assert 2 * dot_macs == fcm.get_total_flops()
    assert report["operator_flops"]["by_operator"]["aten.convolution"] + \
        report["operator_flops"]["by_operator"]["aten.addmm"] == fcm.get_total_flops()


class SqueezeExcite(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.fc2(F.relu(self.fc1(self.pool(x)))))


def mobilenet_like():
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.Hardswish(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.BatchNorm2d(16), nn.Hardswish(), SqueezeExcite(16),
        nn.Conv2d(16, 24, 1), nn.BatchNorm2d(24), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 10))


def test_mobilenet_style(torchscan):
    torch.manual_seed(0)
    report = crawl_twice(torchscan, mobilenet_like(), (3, 32, 32))
    complete(report, "module_flops", "macs", "dmas", "operator_flops")
    # Hardswish is 5 operations per value: after the stride-2 stem, 16 x 16 x 16 values.
    hardswish = [l for l in report["layers"] if l["type"] == "Hardswish"]
    assert [l["metrics"]["module_flops"]["value"] for l in hardswish] == [5 * 16 * 16 * 16] * 2


class UNetLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(1, 4, 3, padding=1)
        self.bottom = nn.Conv2d(4, 8, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.head = nn.Conv2d(8, 1, 1)

    def forward(self, x):
        skip = F.relu(self.down(x))
        y = F.relu(self.up(F.relu(self.bottom(skip))))
        y = F.interpolate(y, size=skip.shape[-2:], mode="bilinear", align_corners=False)
        return self.head(torch.cat([y, skip], dim=1))


def test_unet_style(torchscan):
    torch.manual_seed(0)
    report = crawl_twice(torchscan, UNetLike(), (1, 16, 16))
    complete(report, "module_flops", "macs", "dmas", "operator_flops")
    head = [l for l in report["layers"] if l["path"] == "head"][0]
    # The head sees the concatenation of the skip (rf 3) and the upsampled path
    # (3x3 stride-2 conv on rf 3 -> 3 + 2*1 = 5, jump 2; 2x2 transposed, stride 2 ->
    # rf 5 + (ceil(2/2) - 1)*2 = 5, jump 1; bilinear adds one input step: 6): the wider, 6.
    assert head["metrics"]["receptive_field"]["value"] == 6


class ViTLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 4, stride=4)
        self.cls = nn.Parameter(torch.zeros(1, 1, 16))
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2,
                                             enable_nested_tensor=False)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1)
        return self.head(self.encoder(tokens)[:, 0])


def test_vit_style(torchscan):
    torch.manual_seed(0)
    report = crawl_twice(torchscan, ViTLike().eval(), (3, 16, 16))
    complete(report, "module_flops", "macs", "dmas", "operator_flops")


def test_lstm_model_names_what_the_module_view_lacks(torchscan):
    torch.manual_seed(0)
    model = nn.LSTM(8, 16, batch_first=True)
    report = crawl_twice(torchscan, model, args=(torch.randn(2, 5, 8),))
    # Operator view: 10 steps x rows x (2*4*16*24 + 28*16) = 35200 (fused LSTM layer formula).
    assert report["totals"]["operator_flops"] == {**report["totals"]["operator_flops"], "status": "complete",
                                                  "value": 35200}
    # The module view has no LSTM convention: partial, and it says which operator.
    assert report["totals"]["module_flops"]["status"] == "partial"
    assert any(d["operator"] == "aten.mkldnn_rnn_layer" for d in report["diagnostics"]
               if d["code"] == "uncounted_operator")
