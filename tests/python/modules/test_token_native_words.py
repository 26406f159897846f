"""Native attention and Transformer layers' token requests in words
(NativeLayerWords, Note [Token-flow requests without JSON] in
analyses/token_flow.h): every request a crawl makes gets, in words, the
answer the JSON request gets, and a crawl without the word entry point
writes the same report."""
import json

import pytest
import torch
import torch.nn as nn

import torchscan
from torchscan import tokens
from torchscan._library import Session

L, S, E = 5, 7, 16


class Attention(nn.Module):
    def __init__(self, **options):
        super().__init__()
        torch.manual_seed(0)
        self.attn = nn.MultiheadAttention(E, 4, **options)

    def forward(self, q, kv, mask=None, padding=None, is_causal=False):
        return self.attn(q, kv, kv, attn_mask=mask, key_padding_mask=padding, need_weights=False,
                         is_causal=is_causal)[0]


def _cases():
    torch.manual_seed(0)
    x, memory = torch.randn(2, L, E), torch.randn(2, S, E)
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
    padding = torch.zeros(2, S, dtype=torch.bool)
    padding[:, 4:] = True
    holes = torch.zeros(L, L)
    holes[1, 0] = holes[3, 2] = float("-inf")
    nan = torch.zeros(L, L)
    nan[0, 1] = float("nan")
    encoder = nn.TransformerEncoderLayer(E, 4, 32, dropout=0.0, batch_first=True).eval()
    decoder = nn.TransformerDecoderLayer(E, 4, 32, dropout=0.0, batch_first=True).eval()
    stack = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, 4, 32, dropout=0.0, batch_first=True), 2,
                                  enable_nested_tensor=False).eval()
    return [
        ("self, causal mask", Attention(batch_first=True), (x, x, causal), {}),
        ("self, is_causal", Attention(batch_first=True), (x, x, causal), {"is_causal": True}),
        ("sequence first", Attention(), (x.transpose(0, 1), x.transpose(0, 1)), {}),
        ("cross, key padding", Attention(batch_first=True), (x, memory, None, padding), {}),
        ("float mask with holes", Attention(batch_first=True), (x, x, holes), {}),
        ("a mask with NaN", Attention(batch_first=True), (x, x, nan), {}),
        ("bias_k", Attention(batch_first=True, add_bias_kv=True), (x, x), {}),
        ("add_zero_attn", Attention(batch_first=True, add_zero_attn=True), (x, x), {}),
        ("encoder layer, masks", encoder, (x,), {"src_mask": causal, "src_key_padding_mask": padding[:, :L]}),
        ("decoder layer", decoder, (x, memory), {"tgt_mask": causal, "tgt_is_causal": True,
                                                 "memory_key_padding_mask": padding}),
        ("encoder stack", stack, (x,), {"mask": causal}),
        ("meta", Attention(batch_first=True).to("meta"), (x.to("meta"), x.to("meta"), causal.to("meta")), {}),
    ]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_each_request_gets_the_json_answer_in_words(case, monkeypatch):
    _, model, args, kwargs = case
    asked = []
    ask = tokens._ask_in_words

    def recording(req, memo=None):
        answer = ask(req, memo)
        asked.append((req, answer))
        return answer

    monkeypatch.setattr(tokens, "_ask_in_words", recording)
    torchscan.crawl_module(model, args=args, kwargs=kwargs)
    assert asked, "the crawl made no native-layer request"
    for req, answer in asked:
        assert answer is not None, req  # answered in words, not handed to JSON
        assert answer == json.loads(Session.token_flow(json.dumps(req))), req


def test_a_crawl_without_the_word_entry_point_writes_the_same_report(monkeypatch):
    for _, model, args, kwargs in _cases():
        with_words = torchscan.crawl_module(model, args=args, kwargs=kwargs)
        with monkeypatch.context() as m:
            m.setattr(tokens._NativeWords, "loaded", True)
            m.setattr(tokens._NativeWords, "fn", None)
            with_json = torchscan.crawl_module(model, args=args, kwargs=kwargs)
        for a, b in zip(with_words["layers"], with_json["layers"]):
            assert a.get("token_dependencies") == b.get("token_dependencies"), a["path"]
        assert with_words["diagnostics"] == with_json["diagnostics"]


def test_malformed_word_requests_are_refused():
    fn = tokens._NativeWords.fn if tokens._NativeWords.loaded else None
    if fn is None:
        tokens._NativeWords.load()
        fn = tokens._NativeWords.fn
    assert fn is not None
    answer, _, _, reason_ref, length_ref = tokens._NativeWords.out()
    text = b"MultiheadAttention"

    def ask(words, blob=text, capacity=64):
        return fn(tokens.pack_words(words), len(words), blob, len(blob), answer, capacity, reason_ref, length_ref)

    empty = [0, len(text), 0, 0, 0, 0]  # the layer, then no attention, arguments, masks or flags
    assert ask(empty) >= 4  # well formed (unavailable: no attention given)
    assert ask(empty[:-1]) == -1  # a list count missing
    assert ask(empty + [0]) == -1  # a word past the request
    assert ask([0, len(text) + 1, 0, 0, 0, 0]) == -1  # a string past the text
    assert ask([0, len(text), 0, 1, 0, 0, 5, 0, 0, 0, 0]) == -1  # an argument of an unknown kind
    assert ask([0, len(text), 0, 0, 1, 0, 0, 9, 0, 0, 0, 0, 0]) == -1  # a mask with an unknown problem
    assert ask([0, len(text), 1 << 40, 0, 0, 0, 0]) == -1  # a count past the words left
    assert ask(empty, capacity=3) == -1  # no room for the answer


def test_a_mask_every_layer_gets_is_read_once_per_reading(monkeypatch):
    """nn.TransformerEncoder hands one mask and one key padding mask to each
    layer, which hands them to its attention: eight calls read them, each
    mask once per way of reading it, with the reports of reading every time."""
    from torchscan import _token_masks

    torch.manual_seed(0)
    stack = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, 4, 32, dropout=0.0, batch_first=True), 4,
                                  enable_nested_tensor=False).eval()
    x = torch.randn(2, L, E)
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)  # True: blocked
    padding = torch.zeros(2, L, dtype=torch.bool)
    padding[:, 4:] = True
    reads = []
    read_mask = tokens.read_mask

    def counted(mask, **kwargs):
        reads.append((mask.dtype, kwargs.get("padding", False)))
        return read_mask(mask, **kwargs)

    monkeypatch.setattr(tokens, "read_mask", counted)
    options = {"args": (x,), "kwargs": {"mask": causal, "src_key_padding_mask": padding}}
    once = torchscan.crawl_module(stack, **options)
    # The stack turns both into float masks once (F._canonical_mask) and passes those on.
    assert sorted(reads, key=lambda r: r[1]) == [(torch.float32, False), (torch.float32, True)]
    reads.clear()
    with monkeypatch.context() as m:
        m.setattr(_token_masks.MaskReads, "summary",
                  lambda self, mask, blocks_true=False, padding=False: tokens.read_mask(
                      mask, blocks_true=blocks_true, padding=padding))
        every_time = torchscan.crawl_module(stack, **options)
    assert len(reads) == 8 * 2  # four layers and their attentions, two masks each
    analysed = 0
    for a, b in zip(once["layers"], every_time["layers"]):
        assert a.get("token_dependencies") == b.get("token_dependencies"), a["path"]
        analysed += "token_dependencies" in a
    assert analysed == 9  # the stack, four layers, four attentions


def _counting_engine(monkeypatch) -> list:
    """Counts the native word requests that reach the engine."""
    if not tokens._NativeWords.loaded:
        tokens._NativeWords.load()
    fn, calls = tokens._NativeWords.fn, []
    assert fn is not None

    def counted(*words):
        calls.append(words[1])
        return fn(*words)

    monkeypatch.setattr(tokens._NativeWords, "fn", counted)
    return calls


def _without_memo(monkeypatch):
    ask = tokens._ask_in_words
    monkeypatch.setattr(tokens, "_ask_in_words", lambda req, memo=None: ask(req, None))


def test_layers_called_alike_ask_the_engine_once(monkeypatch):
    """Note [Native answers by request]: the four layers of a stack get one
    request in words (numbered tensors, one mask summary), and their
    attentions another: two engine calls, and the rows of a crawl that asks
    for every call."""
    torch.manual_seed(0)
    stack = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, 4, 32, dropout=0.0, batch_first=True), 4,
                                  enable_nested_tensor=False).eval()
    x = torch.randn(2, L, E)
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
    options = {"args": (x,), "kwargs": {"mask": causal}}
    with monkeypatch.context() as m:
        calls = _counting_engine(m)
        remembered = torchscan.crawl_module(stack, **options)
    assert len(calls) == 2
    with monkeypatch.context() as m:
        calls = _counting_engine(m)
        _without_memo(m)
        asked = torchscan.crawl_module(stack, **options)
    assert len(calls) == 8
    rows = [(a.get("token_dependencies"), b.get("token_dependencies")) for a, b in zip(remembered["layers"],
                                                                                        asked["layers"])]
    assert all(a == b for a, b in rows)
    assert sum(a is not None and a["status"] == "complete" for a, _ in rows) == 9


class _TwoWays(nn.Module):
    """One attention called as self-attention, then on another tensor of the
    same shape as keys and values, then again as self-attention with a mask:
    the same shapes, different requests."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.attn = nn.MultiheadAttention(E, 4, batch_first=True)

    def forward(self, x, y, mask):
        a = self.attn(x, x, x, need_weights=False)[0]
        b = self.attn(a, y, y, need_weights=False)[0]
        return self.attn(b, b, b, attn_mask=mask, need_weights=False)[0]


def test_calls_that_differ_only_in_which_tensors_are_one_get_their_own_answer(monkeypatch):
    torch.manual_seed(0)
    x, y = torch.randn(2, L, E), torch.randn(2, L, E)
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
    options = {"args": (x, y, causal)}
    with monkeypatch.context() as m:
        calls = _counting_engine(m)
        remembered = torchscan.crawl_module(_TwoWays(), **options)
    assert len(calls) == 3
    with monkeypatch.context() as m:
        _without_memo(m)
        asked = torchscan.crawl_module(_TwoWays(), **options)
    deps = [layer["token_dependencies"] for layer in remembered["layers"] if layer["path"] == "attn"]
    assert deps == [layer["token_dependencies"] for layer in asked["layers"] if layer["path"] == "attn"]
    # Self-attention: one source read by query, key and value; cross: two.
    assert [[s["arguments"] for s in d["sources"]] for d in deps] == [
        [["query", "key", "value"]], [["query"], ["key", "value"]], [["query", "key", "value"]]]
    assert deps[0]["sources"][0]["relation"] == {"kind": "all"}
    assert deps[2]["sources"][0]["relation"]["kind"] == "prefix"
