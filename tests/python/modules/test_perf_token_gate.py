"""The token analysis' first question after every module call, "did this
call run attention or a softmax, and with which masks?", is answered by
the library's C entry point (torchscan_token_flow_masks) without JSON: it
must give the JSON query's answer for every call, and a model without
attention must make no JSON request at all."""

import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchscan
from torchscan import token_flow
from tests.fixtures import models

pytestmark = pytest.mark.skipif(token_flow._native_query() is None,
                                reason="a library built before torchscan_token_flow_masks")


class _Attention(nn.Module):
    def __init__(self, width=16, heads=4):
        super().__init__()
        self.qkv, self.out, self.heads = nn.Linear(width, 3 * width), nn.Linear(width, width), heads

    def forward(self, x, mask=None):
        n, length, width = x.shape
        q, k, v = (t.view(n, length, self.heads, -1).transpose(1, 2) for t in self.qkv(x).split(width, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        return self.out(y.transpose(1, 2).reshape(n, length, width))


class _Explicit(nn.Module):
    """Attention written with explicit products: a softmax, no attention operator."""

    def forward(self, q, k):
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ k


def _cases():
    torch.manual_seed(0)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    yield "attention", nn.Sequential(_Attention(), nn.LayerNorm(16)), {"args": (torch.rand(2, 5, 16),)}
    yield "attention_masks", _Attention(), {"args": (torch.rand(2, 5, 16),), "kwargs": {"mask": mask}}
    yield "explicit", _Explicit(), {"args": (torch.rand(2, 5, 8), torch.rand(2, 5, 8))}
    yield "encoder", nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True), 2,
                                           enable_nested_tensor=False), {"args": (torch.rand(2, 5, 16),)}
    yield "cnn", models.small_cnn(), {"input_shape": (3, 32, 32)}
    try:
        import transformers
    except ImportError:
        return
    ids = torch.randint(0, 100, (1, 8))
    for implementation in ("sdpa", "eager"):
        bert = transformers.BertModel(transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100,
            max_position_embeddings=64, attn_implementation=implementation)).eval()
        yield f"bert_{implementation}", bert, {"kwargs": {"input_ids": ids, "attention_mask": torch.ones_like(ids)}}


@pytest.mark.parametrize("name,model,options", list(_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_native_query_answers_as_the_json_query(name, model, options, monkeypatch):
    native_found = token_flow.TokenFlow._found
    asked = []

    def both(self, path, scope):
        native = native_found(self, path, scope)
        by_json = json.loads(token_flow._session().token_flow(json.dumps(
            {"query": "masks", "scope": scope, "path": path})))
        # The JSON answer omits "softmax" when the scope is not this scan's; both then report nothing.
        assert (native["attention"], bool(native.get("softmax")), list(native["masks"])) == \
            (by_json["attention"], bool(by_json.get("softmax")), by_json["masks"]), (name, path)
        asked.append((path, native["attention"] or bool(native.get("softmax"))))
        return native

    monkeypatch.setattr(token_flow.TokenFlow, "_found", both)
    report = torchscan.crawl_module(model, **options)
    assert len(asked) == len([l for l in report["layers"] if not torchscan.tokens.applies(_module(model, l))])
    if name == "cnn":
        assert not any(ran for _, ran in asked)
    else:
        assert any(ran for _, ran in asked)


def _module(model, layer):
    return model.get_submodule(layer["path"]) if layer["path"] else model


def test_a_model_without_attention_makes_no_json_request(monkeypatch):
    calls = []
    session = token_flow._session()
    original = session.token_flow

    class Counting:
        def __getattr__(self, name):
            return getattr(session, name)

        @staticmethod
        def token_flow(request):
            calls.append(request)
            return original(request)

    monkeypatch.setattr(token_flow, "_session", lambda: Counting)
    report = torchscan.crawl_module(models.small_cnn(), (3, 32, 32))
    assert len(report["layers"]) > 5 and calls == []
