"""summary() renders its table from the report in memory (torchscan/_render.py)
instead of writing it out as JSON for the library's renderer: the two must
agree character for character. Each case renders one report both ways, at
every depth, with and without the receptive-field columns."""

import json
from collections import OrderedDict

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchscan
from torchscan._render import render_analysis
from tests.fixtures import models

torch.manual_seed(0)


class _Attention(nn.Module):
    def __init__(self, width=16, heads=4):
        super().__init__()
        self.qkv, self.out, self.heads = nn.Linear(width, 3 * width), nn.Linear(width, width), heads

    def forward(self, x):
        n, length, width = x.shape
        q, k, v = (t.view(n, length, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(width, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(n, length, width))


class _Tied(nn.Module):
    """Shared parameters (a note under the table) and a module called twice (a "#1" row)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.b.weight = self.a.weight
        self.unused = nn.Linear(4, 100)  # parameters in no row

    def forward(self, x):
        return self.b(self.a(self.a(x)))


def _cases():
    yield "small_cnn", models.small_cnn(), {"input_shape": (3, 32, 32)}
    yield "small_cnn_memory", models.small_cnn(), {"input_shape": (3, 32, 32), "memory": True}
    yield "mobilenet_v3_small", models.mobilenet_v3_small(), {"args": (torch.rand(1, 3, 64, 64),)}
    yield "tied", _Tied(), {"args": (torch.rand(2, 4),)}
    yield "attention", _Attention(), {"args": (torch.rand(2, 5, 16),)}
    # Widths count bytes: a path of non-ASCII names is wider in bytes than in characters.
    yield "non_ascii", nn.Sequential(OrderedDict([("couche_é", nn.Linear(4, 4)), ("層", nn.ReLU())])), {
        "args": (torch.rand(2, 4),)}
    yield "partial", nn.Sequential(nn.Linear(4, 4)), {"args": (torch.rand(2, 4),),
                                                     "custom_modules": {nn.Linear: lambda *a: {"macs": {
                                                         "status": "partial", "known_value": 3}}}}
    yield "encoder", nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True), 2,
                                           enable_nested_tensor=False), {"args": (torch.rand(2, 5, 16),)}
    try:
        import transformers
    except ImportError:
        return
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64,
                                     bos_token_id=0, eos_token_id=0)
    yield "gpt2", transformers.GPT2LMHeadModel(config).eval(), {"kwargs": {"input_ids": torch.randint(0, 100, (1, 8))}}


@pytest.mark.parametrize("name,model,options", list(_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_in_memory_table_is_the_library_table(name, model, options):
    report = torchscan.summary(model, verbose=False, **options)
    assert report._built
    saved = json.loads(json.dumps(report))  # what render_report reads: the report as saved
    for depth in (None, 0, 1, 2, 3, 10):
        for receptive_field in (False, True):
            expected = torchscan.render_report(saved, depth, receptive_field)
            assert report.render(depth, receptive_field) == expected, (name, depth, receptive_field)
            assert render_analysis(report, -1 if depth is None else depth, receptive_field) == expected
    assert str(report) == torchscan.render_report(saved, None, False).rstrip("\n")


def test_an_edited_report_goes_to_the_library_renderer():
    report = torchscan.summary(nn.Linear(4, 4), (4,), verbose=False)
    report["layers"] = 3  # a report the library refuses: repr says so instead of a table
    assert not report._built
    assert repr(report).startswith("SummaryReport (no table: ")
    with pytest.raises(ValueError):
        report.render()


def test_wide_and_odd_values_render_as_the_library_renders_them():
    report = torchscan.summary(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (4,), verbose=False)
    # Past 2^64 (a wide count), partial, and a float parameter count: each
    # formatted by the same rules ("1.23e+..." never appears: SI units).
    report["layers"][1]["metrics"]["module_flops"] = {"status": "partial", "value": None,
                                                      "known_value": 2**70 + 1, "unit": "FLOPs",
                                                      "scope": "forward", "method": "module_formulas"}
    report["totals"]["module_flops"] = dict(report["layers"][1]["metrics"]["module_flops"])
    report["layers"][0]["parameters"] = 20.0
    saved = json.loads(json.dumps(report))
    for depth in (None, 0):
        assert render_analysis(report, -1 if depth is None else depth, True) == \
            torchscan.render_report(saved, depth, True)
