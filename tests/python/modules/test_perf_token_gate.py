"""The token analysis' first question after every module call, "did this
call run attention or a softmax, and with which masks?", is answered
without JSON: closing the call's scope (the C pop) says whether it did,
and only then does the C query (torchscan_token_flow_masks) name the
masks. Both must give the JSON query's answer for every call, and a model
without attention must make no JSON request at all. The dependency request
itself goes as 64-bit words where no masks are involved; its answer must be
the JSON request's."""

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
    # A decoder step with a KV cache: its attention's relation is unavailable,
    # so the enclosing calls' requests carry steps with reasons.
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, attn_implementation="sdpa")).eval()
    with torch.no_grad():
        past = llama(input_ids=ids, use_cache=True).past_key_values
    yield "llama", llama, {"kwargs": {"input_ids": ids[:, :1], "past_key_values": past, "use_cache": True}}


@pytest.mark.parametrize("name,model,options", list(_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_closing_a_scope_and_the_native_query_answer_as_the_json_query(name, model, options, monkeypatch):
    """Closing a module call's scope says whether it ran attention or a
    softmax; only then is the C query asked for its masks. For every module
    call both must give the JSON query's answer."""
    after, native_found = token_flow.TokenFlow.after, token_flow.TokenFlow._found
    seen = []

    def checked(self, module, path, scope, index, args, kwargs, output, ran=True):
        by_json = json.loads(token_flow._session().token_flow(json.dumps(
            {"query": "masks", "scope": scope, "path": path})))
        assert ran == (by_json["attention"] or bool(by_json.get("softmax"))), (name, path)
        if ran:
            native = native_found(self, path, scope)
            assert (native["attention"], bool(native.get("softmax")), list(native["masks"])) == \
                (by_json["attention"], bool(by_json.get("softmax")), by_json["masks"]), (name, path)
        seen.append((path, ran))
        return after(self, module, path, scope, index, args, kwargs, output, ran)

    monkeypatch.setattr(token_flow.TokenFlow, "after", checked)
    report = torchscan.crawl_module(model, **options)
    assert sorted(p for p, _ in seen) == sorted(l["path"] for l in report["layers"])  # every call, once
    if name == "cnn":
        assert not any(ran for _, ran in seen)
    else:
        assert any(ran for _, ran in seen)


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


@pytest.mark.parametrize("name,model,options", list(_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_a_request_as_words_is_answered_as_the_json_request(name, model, options, monkeypatch):
    """Note [Token-flow requests without JSON]: for every request the crawl
    sends as words, the same request in JSON gets the same answer."""
    if token_flow._native_words() is None:
        pytest.skip("a library built before torchscan_token_flow_words")
    ask = token_flow._WordRequests.ask
    asked = []

    def both(self, scope, path, out, sources, steps):
        answer = ask(self, scope, path, out, sources, steps)
        request = {"scope": scope, "path": path, "output": out._cdata, "output_sizes": list(out.shape),
                   "inputs": [{"identity": s["identity"], "source": k, "axis": s["sequence_axis"],
                               "length": s["length"]} for k, s in enumerate(sources)],
                   "masks": [], "steps": steps}
        by_json = json.loads(token_flow._session().token_flow(json.dumps(request)))
        # TokenFlowJson names explicit_attention only where it can be true.
        assert answer is not None and bool(answer.pop("explicit_attention", False)) == \
            bool(by_json.pop("explicit_attention", False)), (name, path)
        assert answer == by_json, (name, path)
        asked.append((path, answer["status"], any("reason" in s for s in steps)))
        return ask(self, scope, path, out, sources, steps)

    monkeypatch.setattr(token_flow._WordRequests, "ask", both)
    torchscan.crawl_module(model, **options)
    if name in ("cnn", "attention_masks"):  # no attention / masks: nothing asked as words
        assert asked == []
    elif name == "llama":
        assert any(has_reason for _, _, has_reason in asked)
    elif name in ("attention", "bert_sdpa"):
        assert any(status == "complete" for _, status, _ in asked)
