"""The token analysis' first question after every module call, "did this
call run attention or a softmax, and with which masks?", is answered
without JSON: closing the call's scope (the C pop) says whether it did,
and only then does the C query (torchscan_token_flow_masks) name the
masks. Both must give the JSON query's answer for every call, and a model
without attention must make no JSON request at all. The dependency request
itself goes as 64-bit words, masks' summaries included; its answer must be
the JSON request's."""

import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchscan
from torchscan import _token_masks, token_flow
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


class _OwnMask(_Attention):
    """Its mask made inside the call: the values were never recorded, so its
    relation is unavailable."""

    def forward(self, x, mask=None):
        return super().forward(x, mask=torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril())


class _Explicit(nn.Module):
    """Attention written with explicit products: a softmax, no attention operator."""

    def forward(self, q, k):
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ k


def _cases():
    torch.manual_seed(0)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    yield "attention", nn.Sequential(_Attention(), nn.LayerNorm(16)), {"args": (torch.rand(2, 5, 16),)}
    yield "attention_masks", _Attention(), {"args": (torch.rand(2, 5, 16),), "kwargs": {"mask": mask}}
    # A float mask (-inf blocks), and boolean masks whose batch elements
    # differ (a summary with a problem and no runs).
    floats = torch.zeros(5, 5).masked_fill(~mask, float("-inf"))
    yield "float_mask", _Attention(), {"args": (torch.rand(2, 5, 16),), "kwargs": {"mask": floats}}
    differs = torch.stack([mask, torch.ones(5, 5, dtype=torch.bool)]).unsqueeze(1)
    yield "mask_differs", _Attention(), {"args": (torch.rand(2, 5, 16),), "kwargs": {"mask": differs}}
    # An unavailable relation inside a call: its request carries a step with a reason.
    yield "own_mask", nn.Sequential(_OwnMask(), nn.LayerNorm(16)), {"args": (torch.rand(2, 5, 16),)}
    yield "explicit", _Explicit(), {"args": (torch.rand(2, 5, 8), torch.rand(2, 5, 8))}
    yield "encoder", nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True), 2,
                                           enable_nested_tensor=False), {"args": (torch.rand(2, 5, 16),)}
    yield "cnn", models.small_cnn(), {"input_shape": (3, 32, 32)}
    try:
        import transformers
    except ImportError:
        return
    ids = torch.randint(0, 100, (1, 8))
    berts = {}
    for implementation in ("sdpa", "eager"):
        berts[implementation] = bert = transformers.BertModel(transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100,
            max_position_embeddings=64, attn_implementation=implementation)).eval()
        yield f"bert_{implementation}", bert, {"kwargs": {"input_ids": ids, "attention_mask": torch.ones_like(ids)}}
    # Padding: every layer's SDPA gets the same expanded mask.
    padding = torch.ones_like(ids)
    padding[:, 6:] = 0
    yield "bert_padding", berts["sdpa"], {"kwargs": {"input_ids": ids, "attention_mask": padding}}
    # A decoding step with a KV cache: a token axis of one position (Note [A
    # token axis of one position]), complete.
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, attn_implementation="sdpa")).eval()
    with torch.no_grad():
        past = llama(input_ids=ids, use_cache=True).past_key_values
    yield "llama", llama, {"kwargs": {"input_ids": ids[:, :1], "past_key_values": past, "use_cache": True}}


@pytest.mark.parametrize("name,model,options", list(_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_the_calls_the_hooks_skip_are_those_the_analysis_would_pass_over(name, model, options, monkeypatch):
    """TokenFlow.asks lets the hook skip after() for a call it would pass
    over: the reports are those of asking after() at every call, and a
    model without attention skips every call (no class of it derives from
    a native attention layer's)."""
    after, reached = token_flow.TokenFlow.after, []

    def counted(self, *args):
        reached.append(args[1])
        return after(self, *args)

    monkeypatch.setattr(token_flow.TokenFlow, "after", counted)
    skipping = torchscan.crawl_module(model, **options)
    asked = len(reached)
    with monkeypatch.context() as m:
        m.setattr(token_flow.TokenFlow, "asks", lambda self, module, scope, ran: True)
        every = torchscan.crawl_module(model, **options)
    assert [l.get("token_dependencies") for l in skipping["layers"]] == \
        [l.get("token_dependencies") for l in every["layers"]]
    assert skipping["diagnostics"] == every["diagnostics"]
    assert len(reached) - asked == len(every["layers"])  # every call reached after() in `every`
    # Without attention, after() is never reached: asks() knows a class that is no native layer's.
    assert asked == 0 if name == "cnn" else 0 < asked <= len(every["layers"])


@pytest.mark.parametrize("name,model,options", list(_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_closing_a_scope_and_the_native_query_answer_as_the_json_query(name, model, options, monkeypatch):
    """Closing a module call's scope says whether it ran attention or a
    softmax; only then is the C query asked for its masks. For every module
    call both must give the JSON query's answer."""
    after, native_found = token_flow.TokenFlow.after, token_flow.TokenFlow._found
    seen, found_outside = [], []

    def checked(self, module, path, scope, index, args, kwargs, output, ran=True):
        by_json = json.loads(token_flow._session().token_flow(json.dumps(
            {"query": "masks", "scope": scope, "path": path})))
        assert ran == (by_json["attention"] or bool(by_json.get("softmax"))), (name, path)
        steps = [s for s in self._taken if s > scope]  # the calls inside taken so far (known calls to be)
        for known in ((), steps) if ran else ():  # the whole scope, and outside its known calls
            native = native_found(self, path, scope, known)
            expected = json.loads(token_flow._session().token_flow(json.dumps(
                {"query": "masks", "scope": scope, "path": path, "steps": list(known)})))
            assert (native["attention"], bool(native.get("softmax")), list(native["masks"])) == \
                (expected["attention"], bool(expected.get("softmax")), expected["masks"]), (name, path, known)
        if ran and steps:
            outside = native_found(self, path, scope, steps)
            assert set(outside["masks"]) <= set(by_json["masks"]), (name, path)
            found_outside.append(len(outside["masks"]) < len(by_json["masks"]))
        seen.append((path, ran))
        return after(self, module, path, scope, index, args, kwargs, output, ran)

    monkeypatch.setattr(token_flow.TokenFlow, "after", checked)
    monkeypatch.setattr(token_flow.TokenFlow, "asks", lambda self, module, scope, ran: True)  # every call reaches after()
    report = torchscan.crawl_module(model, **options)
    assert sorted(p for p, _ in seen) == sorted(l["path"] for l in report["layers"])  # every call, once
    if name == "cnn":
        assert not any(ran for _, ran in seen)
    else:
        assert any(ran for _, ran in seen)
    if name == "bert_padding":  # the calls around the attention calls need none of their mask
        assert found_outside and all(found_outside), found_outside


@pytest.mark.parametrize("name,model,options", list(_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_masks_inside_known_calls_are_not_needed(name, model, options, monkeypatch):
    """The mask query passes over the known calls inside a call (the
    request takes them as steps): the reports are those of searching the
    whole call."""
    skipping = torchscan.crawl_module(model, **options)
    found = token_flow.TokenFlow._found
    monkeypatch.setattr(token_flow.TokenFlow, "_found", lambda self, path, scope, steps=(): found(self, path, scope))
    whole = torchscan.crawl_module(model, **options)
    assert [l.get("token_dependencies") for l in skipping["layers"]] == \
        [l.get("token_dependencies") for l in whole["layers"]]
    assert skipping["diagnostics"] == whole["diagnostics"]


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
        pytest.skip("a library built before torchscan_token_flow_request")
    ask = token_flow._WordRequests.ask
    asked = []

    def both(self, scope, path, out, sizes, sources, steps, masks=()):
        answer = ask(self, scope, path, out, sizes, sources, steps, masks)
        request = {"scope": scope, "path": path, "output": out, "output_sizes": sizes,
                   "inputs": [{"identity": s["identity"], "source": k, "axis": s["sequence_axis"],
                               "length": s["length"]} for k, s in enumerate(sources)],
                   "masks": list(masks), "steps": steps}
        by_json = json.loads(token_flow._session().token_flow(json.dumps(request)))
        # TokenFlowJson names explicit_attention only where it can be true.
        assert answer is not None and bool(answer.pop("explicit_attention", False)) == \
            bool(by_json.pop("explicit_attention", False)), (name, path)
        assert answer == by_json, (name, path)
        asked.append((path, answer["status"], any("reason" in s for s in steps), [m.get("problem") for m in masks]))
        return ask(self, scope, path, out, sizes, sources, steps, masks)

    monkeypatch.setattr(token_flow._WordRequests, "ask", both)
    torchscan.crawl_module(model, **options)
    if name == "cnn":  # no attention: nothing asked
        assert asked == []
    elif name == "own_mask":
        assert any(has_reason for _, _, has_reason, _ in asked)
    elif name in ("attention", "bert_sdpa", "llama"):
        assert any(status == "complete" for _, status, _, _ in asked)
    elif name in ("attention_masks", "float_mask"):  # read masks, relations found
        assert any(status == "complete" and problems == [None] for _, status, _, problems in asked), asked
    elif name == "bert_padding":
        # The layers' one mask, sent with the two attention calls that ran
        # SDPA with it: the calls around them take those as steps and ask for
        # no mask.
        with_mask = [path for path, _, _, problems in asked if problems == [None]]
        assert with_mask == ["encoder.layer.0.attention.self", "encoder.layer.1.attention.self"], asked
    elif name == "mask_differs":
        assert any(status == "unavailable" and problems == ["differs"] for _, status, _, problems in asked), asked


class _ChangesItsMask(nn.Module):
    """Three attentions with one mask, changed in place after the first."""

    def __init__(self):
        super().__init__()
        self.first, self.second, self.third = _Attention(), _Attention(), _Attention()

    def forward(self, x, mask):
        y = self.first(x, mask=mask)
        mask.fill_(True)  # every query now sees every key
        return self.third(self.second(y, mask=mask), mask=mask)


def _count_reads(monkeypatch) -> list:
    """Records the version of every mask tokens.read_mask reads from now on."""
    from torchscan import tokens

    reads = []
    read_mask = tokens.read_mask

    def counted(mask, **kwargs):
        reads.append(mask._version)
        return read_mask(mask, **kwargs)

    monkeypatch.setattr(tokens, "read_mask", counted)
    return reads


def test_a_mask_is_read_once_while_it_holds_the_same_values(monkeypatch):
    """A mask shared by several calls is read once; one changed in place is
    read again, and every report equals the one made reading each mask
    every time."""
    from torchscan import tokens

    reads = _count_reads(monkeypatch)

    def crawl(model, options):  # options(): a fresh mask for each crawl
        reads.clear()
        cached = torchscan.crawl_module(model, **options())
        cached_reads = list(reads)
        with monkeypatch.context() as m:
            m.setattr(_token_masks.MaskReads, "summary", lambda self, mask: tokens.read_mask(mask, blocks_true=False))
            reads.clear()
            every_time = torchscan.crawl_module(model, **options())
        for a, b in zip(cached["layers"], every_time["layers"]):
            assert a.get("token_dependencies") == b.get("token_dependencies"), a["path"]
        return cached, cached_reads, list(reads)

    torch.manual_seed(0)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    x = torch.rand(2, 5, 16)
    report, cached, every_time = crawl(_ChangesItsMask(), lambda: {"args": (x,), "kwargs": {"mask": causal.clone()}})
    # first (version 0), then second and third (version 1): two reads, not
    # three. The root takes the three calls as steps and needs no mask.
    assert cached == [0, 1] and every_time == [0, 1, 1]
    sources = {l["path"]: l["token_dependencies"]["sources"][0]["relation"] for l in report["layers"]
               if l.get("token_dependencies", {}).get("status") == "complete"}
    assert sources["first"] == {"kind": "prefix"} and sources["second"] == sources["third"] == {"kind": "all"}, sources


def test_masks_without_a_version_are_read_every_time():
    """An inference tensor has no version counter: its summary is never
    reused, and reading it gives read_mask's answer."""
    from torchscan import tokens

    with torch.inference_mode():
        mask = torch.ones(4, 4, dtype=torch.bool).tril()
    reads = _token_masks.MaskReads()
    first = reads.summary(mask)
    assert first == tokens.read_mask(mask, blocks_true=False)
    assert reads.summary(mask) == first and reads._read == {}


class _WritesItsMaskThroughAnAlias(nn.Module):
    """Two attentions with one mask whose values change between them through
    an alias of its memory that bumps no version counter."""

    def __init__(self, how):
        super().__init__()
        self.first, self.second = _Attention(), _Attention()
        self.how = how

    def forward(self, x, mask):
        y = self.first(x, mask=mask)
        version = mask._version
        if self.how == "data":
            mask.data.fill_(True)
        else:  # a NumPy array sharing the mask's memory
            mask.numpy()[...] = True
        assert mask._version == version  # the write is invisible to the version counter
        return self.second(y, mask=mask)


@pytest.mark.parametrize("how", ["data", "numpy"])
def test_a_mask_written_through_an_alias_is_read_again(how):
    """A write through `.data` or a NumPy view changes a mask's values and
    not its version: the second attention ran with every key let through
    (relation "all"), the first with the causal mask ("prefix"). Reusing the
    first reading gave the second "prefix", a wrong complete."""
    torch.manual_seed(0)
    x = torch.rand(2, 5, 16)
    report = torchscan.crawl_module(_WritesItsMaskThroughAnAlias(how),
                                    args=(x,), kwargs={"mask": torch.ones(5, 5, dtype=torch.bool).tril()})
    relations = {l["path"]: l["token_dependencies"]["sources"][0]["relation"] for l in report["layers"]
                 if l.get("token_dependencies", {}).get("status") == "complete"}
    assert relations["first"] == {"kind": "prefix"} and relations["second"] == {"kind": "all"}, relations


class _SharesItsMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([_Attention() for _ in range(3)])

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask=mask)
        return x


def test_a_dispatch_mode_around_a_crawl_sees_the_models_operators_only():
    """The token analysis reads a dense CPU mask from memory and checks a
    later use's values against a copy of its memory, with no operator: a
    TorchDispatchMode around the crawl sees what it sees around the plain
    forward, call for call."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.calls[str(func)] += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    model, x = _SharesItsMask().eval(), torch.rand(2, 5, 16)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    with Seen() as crawl:
        report = torchscan.crawl_module(model, args=(x,), kwargs={"mask": mask})
    with Seen() as plain, torch.no_grad():
        model(x, mask=mask)
    assert crawl.calls == plain.calls and crawl.calls["aten.addmm.default"] == 6
    # The mask was read and its later uses compared: the three layers and the
    # root (the ModuleList is never called) are analysed.
    assert [(l["path"], l["token_dependencies"]["status"]) for l in report["layers"] if "token_dependencies" in l] == \
        [("", "complete")] + [(f"layers.{i}", "complete") for i in range(3)]


def test_mask_readings_are_reused_only_while_the_memory_is_unchanged(monkeypatch):
    """MaskReads on CPU masks: a second use with the same memory reuses the
    reading; a write through `.data` (no version bump), even to the last
    element a strided view reaches, reads it again; a sparse mask and one
    larger than the copy limit are read every time."""
    from torchscan import tokens

    read_mask = tokens.read_mask
    reads = _count_reads(monkeypatch)
    cache = _token_masks.MaskReads()
    base = torch.ones(6, 8, dtype=torch.bool).tril()
    view = base[::2, 1::3]  # strides (16, 3): its last element is base[4, 7]
    first = cache.summary(view)
    assert cache.summary(view) == first and len(reads) == 1
    base.data[4, 7] = not bool(base[4, 7])  # the view's last element, behind its version counter
    changed = cache.summary(view)
    assert len(reads) == 2 and changed == read_mask(view, blocks_true=False) and changed != first
    base.data[0, 2] = True  # not one of the view's elements, but inside its span: read again, same answer
    assert cache.summary(view) == changed and len(reads) == 3

    empty = torch.ones(0, 4, dtype=torch.bool)
    cache.summary(empty), cache.summary(empty)
    assert len(reads) == 4

    sparse = torch.eye(3, dtype=torch.bool).to_sparse()
    for _ in range(2):
        try:
            cache.summary(sparse)
        except Exception:  # noqa: BLE001 - whatever read_mask says of it, it is asked each time
            pass
    assert len(reads) == 6

    monkeypatch.setattr(_token_masks.MaskReads, "_COPY_BYTES", 16)
    big = torch.ones(5, 5, dtype=torch.bool).tril()  # 25 bytes
    cache.summary(big), cache.summary(big)
    assert len(reads) == 8
