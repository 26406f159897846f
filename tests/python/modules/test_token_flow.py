"""Token dependencies of modules built from operators (torchscan/token_flow.py,
torchscan_dispatch/analyses/token_flow.cc): custom attention around
F.scaled_dot_product_attention, Hugging Face attention, Transformer stacks.
Each expected relation is derived by hand in the test's comment: output i of
an attention reads the values of the keys visible to query i and, when two
or more keys are visible (a softmax over one score is 1), those keys and
query i; per-position operators (projections over features, residual adds,
norms over features) keep output i on what input i read; a stack composes
its layers' relations."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchscan
from tests.fixtures import models
from torchscan import _token_masks, token_flow

L, S, E, H = 5, 7, 16, 4
BLOCKED = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)  # key j > query i


def _row(report, path):
    return next(l for l in report["layers"] if l["path"] == path)


def _deps(report, path=""):
    return _row(report, path)["token_dependencies"]


def _sources(report, path=""):
    deps = _deps(report, path)
    assert deps["status"] == "complete", deps
    assert deps["method"] == "token_flow" and deps["assumptions"]
    return deps["sources"]


def _unavailable(report, path, reason):
    deps = _deps(report, path)
    assert deps["status"] == "unavailable" and reason in deps["reason"], deps
    assert "sources" not in deps and "output" not in deps  # no upper bound passed off as known
    assert ("token_dependencies_unavailable", path) in [(d["code"], d.get("path")) for d in report["diagnostics"]]


def _heads(t, n):
    b, length, _ = t.shape
    return t.view(b, length, n, -1).transpose(1, 2)


class SelfAttention(nn.Module):
    """nanoGPT's shape: one qkv projection split on features, heads, SDPA,
    heads merged back, an output projection."""

    def __init__(self, op=None):
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.proj, self.op = nn.Linear(E, 3 * E), nn.Linear(E, E), op

    def forward(self, x, mask=None, is_causal=False):
        q, k, v = (_heads(t, H) for t in self.qkv(x).split(E, dim=2))
        if self.op == "own_mask":  # made here: its values were never recorded
            mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        if self.op == "cumsum_before":
            q = q.cumsum(dim=2)  # over the token axis
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
        if self.op == "sort_after":
            y = y.sort(dim=2).values  # reorders token positions
        if self.op == "write_view":
            y[:, :, 0] = q[:, :, -1]  # position 0 now holds what position L-1 of q read
        b, _, length, _ = y.shape
        return self.proj(y.transpose(1, 2).contiguous().view(b, length, E))


def test_is_causal_self_attention_is_a_prefix():
    x = torch.randn(2, L, E)
    model = SelfAttention().eval()
    report = torchscan.crawl_module(model, args=(x,), kwargs={"is_causal": True})
    # is_causal: query i sees keys 0..i. Output 0 reads value 0 only (one
    # score); output i >= 1 reads values, keys 0..i and query i. q, k, v are
    # projections of x at their own positions: output i reads x 0..i: prefix.
    assert _sources(report) == [{"arguments": ["x"], "sequence_axis": 1, "length": L, "relation": {"kind": "prefix"}}]
    assert _deps(report)["output"] == {"sequence_axis": 1, "length": L}
    assert "token_dependencies" not in _row(report, "qkv")  # no attention inside: relations do not apply
    assert _row(report, "")["metrics"]["receptive_field"]["method"] == "not_applicable"
    # The analysis's own work (mask reads, none here) is not the model's.
    with torch.no_grad():
        alone = torchscan.measure_flops(lambda: model(x, is_causal=True))
    assert report["operator_flops"]["by_operator"] == alone["by_operator"]


@pytest.mark.parametrize("blocked", [float("-inf"), torch.finfo(torch.float32).min])
@pytest.mark.parametrize("shape", [(L, L), (1, 1, L, L)])
def test_float_additive_causal_masks(blocked, shape):
    # Added to the scores: -inf and the dtype's most negative value give a
    # softmax weight of exactly 0 where key j > query i, 0 lets the rest
    # through: the causal relation of the test above, prefix.
    mask = torch.zeros(L, L).masked_fill(BLOCKED, blocked).reshape(shape)
    report = torchscan.crawl_module(SelfAttention(), args=(torch.randn(2, L, E), mask))
    assert _sources(report) == [{"arguments": ["x"], "sequence_axis": 1, "length": L, "relation": {"kind": "prefix"}}]


def test_boolean_key_padding_cross_attention():
    class Cross(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.kv = nn.Linear(E, E), nn.Linear(E, 2 * E)

        def forward(self, x, memory, keep):
            k, v = (_heads(t, H) for t in self.kv(memory).chunk(2, dim=-1))
            return F.scaled_dot_product_attention(_heads(self.q(x), H), k, v, attn_mask=keep)

    keep = torch.ones(2, 1, 1, S, dtype=torch.bool)
    keep[..., 4:] = False  # SDPA's boolean masks let True through: memory 4..6 are padding in both rows
    report = torchscan.crawl_module(Cross(), args=(torch.randn(2, L, E), torch.randn(2, S, E), keep))
    # Every query sees memory 0..3 (four scores): output i reads query i
    # (x at i: same_position) and keys/values 0..3 (memory: all below 4).
    # The output is (N, H, L, D): its positions are on dim 2.
    assert _sources(report) == [
        {"arguments": ["x"], "sequence_axis": 1, "length": L, "relation": {"kind": "same_position"}},
        {"arguments": ["memory"], "sequence_axis": 1, "length": S, "relation": {"kind": "all", "limit": 4}},
    ]
    assert _deps(report)["output"] == {"sequence_axis": 2, "length": L}


class Grouped(nn.Module):
    """4 query heads over 2 key/value heads: enable_gqa, or the key/value
    heads repeated as Hugging Face's repeat_kv does (expand + reshape)."""

    def __init__(self, repeat_kv):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(E, E), nn.Linear(E, E // 2), nn.Linear(E, E // 2)
        self.repeat_kv = repeat_kv

    def forward(self, x):
        q, k, v = _heads(self.q(x), H), _heads(self.k(x), H // 2), _heads(self.v(x), H // 2)
        if not self.repeat_kv:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        b, n, length, d = k.shape
        k, v = (t[:, :, None, :, :].expand(b, n, 2, length, d).reshape(b, n * 2, length, d) for t in (k, v))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("repeat_kv", [False, True])
def test_grouped_query_attention(repeat_kv):
    # Heads share keys/values; no position moves: the causal relation, prefix.
    report = torchscan.crawl_module(Grouped(repeat_kv), args=(torch.randn(2, L, E),))
    assert _sources(report) == [{"arguments": ["x"], "sequence_axis": 1, "length": L, "relation": {"kind": "prefix"}}]


def test_an_unsupported_operator_on_the_way_is_named():
    x = torch.randn(2, L, E)
    # A cumulative sum over the token axis, and a sort along it: the pass does
    # not guess what they do to positions; the result says which operator.
    _unavailable(torchscan.crawl_module(SelfAttention("cumsum_before"), args=(x,)), "", "aten::cumsum")
    _unavailable(torchscan.crawl_module(SelfAttention("sort_after"), args=(x,)), "", "aten::sort")
    # A write through a view (select + copy_) changes its base, which the pass
    # does not follow value by value: unavailable, not the stale prefix.
    _unavailable(torchscan.crawl_module(SelfAttention("write_view"), args=(x,), kwargs={"is_causal": True}), "",
                 "wrote in place into a view")


def test_masks_the_pass_cannot_read_or_name():
    x = torch.randn(2, L, E)
    per_batch = torch.ones(2, 1, L, L, dtype=torch.bool).tril()
    per_batch[1, 0, 4, 0] = False  # batch element 1 differs at one entry
    _unavailable(torchscan.crawl_module(SelfAttention(), args=(x, per_batch)), "", "differs between batch elements")
    # A window of 2 (i sees i-1, i) is none of the schema's relations.
    window = torch.ones(L, L, dtype=torch.bool).tril() & torch.ones(L, L, dtype=torch.bool).triu(-1)
    _unavailable(torchscan.crawl_module(SelfAttention(), args=(x, window)), "", "none of the relations")

    _unavailable(torchscan.crawl_module(SelfAttention("own_mask"), args=(x,)), "", "neither an argument nor a buffer")

    class Outside(nn.Module):  # made by the caller: an argument of the call that attends
        def __init__(self):
            super().__init__()
            self.attn = SelfAttention()

        def forward(self, x):
            return self.attn(x, torch.ones(L, L, dtype=torch.bool).tril())

    # attn reads it (key j <= query i): prefix, and so its caller.
    report = torchscan.crawl_module(Outside(), args=(x,))
    assert _sources(report, "attn")[0]["relation"] == _sources(report)[0]["relation"] == {"kind": "prefix"}


class _WritesItsMaskAfterward(SelfAttention):
    """Attends with the mask it is given, then writes into that mask."""

    def __init__(self, write):
        super().__init__()
        self.write = write

    def forward(self, x, mask):
        y = super().forward(x, mask)
        self.write(mask)
        return y


@pytest.mark.parametrize("write", ["fill_", "copy_", "a view's fill_"])
def test_a_mask_written_after_the_attention_read_it_is_unavailable(write):
    """The attention ran with the causal mask (key j <= query i: prefix);
    the mask's values are read when the call returns, by then all True
    ("all"). The pass sees the in-place write after the attention, into the
    mask or into a view made from it, and says the values it ran with are
    not known. A mask left alone gives prefix."""
    writes = {"fill_": lambda m: m.fill_(True), "copy_": lambda m: m.copy_(torch.ones(L, L, dtype=torch.bool)),
              "a view's fill_": lambda m: m[1:, :].fill_(True)}
    x = torch.randn(2, L, E)
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    report = torchscan.crawl_module(_WritesItsMaskAfterward(writes[write]), args=(x, causal))
    _unavailable(report, "", "wrote into the mask after the attention read it")
    report = torchscan.crawl_module(_WritesItsMaskAfterward(lambda m: None),
                                    args=(x, torch.ones(L, L, dtype=torch.bool).tril()))
    assert _sources(report)[0]["relation"] == {"kind": "prefix"}


def test_a_buffer_mask_is_read():
    class Buffered(SelfAttention):
        def __init__(self):
            super().__init__()
            self.register_buffer("keep", torch.ones(L, L, dtype=torch.bool).tril())

        def forward(self, x):
            return super().forward(x, self.keep)

    # keep: key j <= query i, the causal relation: prefix.
    report = torchscan.crawl_module(Buffered(), args=(torch.randn(2, L, E),))
    assert _sources(report)[0]["relation"] == {"kind": "prefix"}


class _Bank(nn.Module):
    """Holds a mask as a buffer (keep: key j <= query i, the causal relation)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("keep", torch.ones(L, L, dtype=torch.bool).tril())


def test_masks_held_deeper_in_the_tree_are_found_as_a_walk_finds_them(monkeypatch):
    class Deep(SelfAttention):  # the mask is a grandchild's buffer, not an argument of the call
        def __init__(self):
            super().__init__()
            self.store = nn.Sequential(_Bank())

        def forward(self, x):
            return super().forward(x, self.store[0].keep)

    deep = Deep()
    x = torch.randn(2, L, E)
    spans = []
    span = _token_masks.TreeBuffers._span

    def recorded(self, module):
        spans.append(span(self, module))
        return spans[-1]

    monkeypatch.setattr(_token_masks.TreeBuffers, "_span", recorded)
    # A tree, and one that reaches `deep` twice: both searched in the crawl's
    # preorder (every path: the Sequential, then per Deep itself, qkv, proj,
    # store and its bank, five positions), `deep` at its first span both
    # times. The Sequential takes both calls as steps and searches no mask.
    tree, shared = torchscan.crawl_module(nn.Sequential(Deep(), Deep()), args=(x,)), \
        torchscan.crawl_module(nn.Sequential(deep, deep), args=(x,))
    assert spans == [(1, 6), (6, 11), (1, 6), (1, 6)], spans
    monkeypatch.setattr(_token_masks.TreeBuffers, "_span", lambda self, module: None)  # a walk throughout
    for report, walked in ((tree, torchscan.crawl_module(nn.Sequential(Deep(), Deep()), args=(x,))),
                           (shared, torchscan.crawl_module(nn.Sequential(deep, deep), args=(x,)))):
        # keep: key j <= query i, at each Deep call and through both (the residual-free chain): prefix.
        outer = [r["token_dependencies"] for r in report["layers"] if r["path"] in ("", "0", "1")]
        assert len(outer) == 3 and all(d["status"] == "complete" for d in outer), outer
        assert all(d["sources"][0]["relation"] == {"kind": "prefix"} for d in outer)
        assert [r.get("token_dependencies") for r in report["layers"]] == \
            [r.get("token_dependencies") for r in walked["layers"]]


def test_a_mask_held_by_a_module_outside_the_call_is_not_its_buffer(monkeypatch):
    """The search covers the call's module and its descendants: a mask that
    is a buffer of a sibling (reached through a plain attribute, not a
    child) is neither an argument of the call nor its buffer, so its values
    are unknown to this call, whatever else in the tree holds it, as a walk
    of the call's own subtree finds them."""

    class Borrowing(SelfAttention):
        def __init__(self, bank):
            super().__init__()
            self.banks = [bank]  # not a submodule

        def forward(self, x):
            return super().forward(x, self.banks[0].keep)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.bank = _Bank()
            self.attn = Borrowing(self.bank)

        def forward(self, x):
            return self.attn(x)

    x = torch.randn(2, L, E)
    report = torchscan.crawl_module(Outer(), args=(x,))
    _unavailable(report, "attn", "neither an argument nor a buffer")
    monkeypatch.setattr(_token_masks.TreeBuffers, "_span", lambda self, module: None)  # a walk throughout
    walked = torchscan.crawl_module(Outer(), args=(x,))
    assert [r.get("token_dependencies") for r in report["layers"]] == \
        [r.get("token_dependencies") for r in walked["layers"]]


@pytest.mark.parametrize("value", ["cache", "none", "named", "structseq", "dict_subclass", "nested"])
def test_arguments_are_named_as_tree_flatten_finds_their_tensors(value):
    """_named_tensors skips a value that is no pytree node and no tensor (a
    key/value cache object) without flattening it: every kind of value
    gives the tensors tree_flatten finds in it, named the same way."""
    from collections import namedtuple

    from torch.utils._pytree import tree_flatten

    class Cache:  # an object the pytree does not know: a leaf without tensors
        def __init__(self):
            self.keys = [torch.randn(2)]

    class Plain(dict):  # a dict subclass that is not registered: a leaf too
        pass

    Pair = namedtuple("Pair", "a b")
    t = torch.randn(3)
    values = {"cache": Cache(), "none": None, "named": Pair(t, torch.randn(2)), "structseq": torch.randn(3, 4).max(0),
              "dict_subclass": Plain(x=t), "nested": {"a": [t, (torch.randn(1), 2)], "b": "text"}}

    class Takes(nn.Module):
        def forward(self, x, extra=None):
            return x

    x = torch.randn(2)
    named = token_flow._named_tensors(Takes(), (x,), {"extra": values[value]})
    leaves = [v for v in tree_flatten(values[value])[0] if isinstance(v, torch.Tensor)]
    expected = [("x", x)] + [("extra" if len(leaves) == 1 else f"extra[{k}]", v) for k, v in enumerate(leaves)]
    assert [n for n, _ in named] == [n for n, _ in expected]
    assert all(v is e for (_, v), (_, e) in zip(named, expected))


def test_a_mask_in_a_child_added_during_the_forward_is_unknown():
    """The search covers the modules the crawl listed when it started: a
    child added by the forward is not searched, and the call says its mask's
    values are unknown instead of guessing."""
    class Late(SelfAttention):
        def forward(self, x):
            if not hasattr(self, "late"):
                self.late = _Bank()
            return super().forward(x, self.late.keep)

    x = torch.randn(2, L, E)
    late = Late()
    first = torchscan.crawl_module(nn.Sequential(late), args=(x,))
    deps = [r["token_dependencies"] for r in first["layers"] if r["path"] == "0"][0]
    assert deps["status"] == "unavailable" and "mask" in deps["reason"], deps
    # Listed from the next crawl on (the child is in the tree when it starts): prefix.
    second = torchscan.crawl_module(nn.Sequential(late), args=(x,))
    deps = [r["token_dependencies"] for r in second["layers"] if r["path"] == "0"][0]
    assert deps["status"] == "complete" and deps["sources"][0]["relation"] == {"kind": "prefix"}, deps


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.attn, self.mlp = nn.LayerNorm(E), SelfAttention(), nn.Sequential(
            nn.Linear(E, 2 * E), nn.GELU(), nn.Linear(2 * E, E))

    def forward(self, x):
        x = x + self.attn(self.norm(x), is_causal=True)
        return x + self.mlp(x)


def test_custom_blocks_compose():
    x = torch.randn(2, L, E)
    model = nn.Sequential(Block(), Block()).eval()
    report = torchscan.crawl_module(model, args=(x,))
    # A block: causal attention (prefix) plus the residual i (within 0..i),
    # then a per-position MLP and residual: prefix. Two blocks: output i
    # reads block 1's outputs 0..i, each reading x 0..its position: prefix.
    for path in ("0.attn", "0", "1", ""):
        assert _sources(report, path)[0]["relation"] == {"kind": "prefix"}, path


def test_a_tensor_made_inside_a_known_call_other_than_its_output_is_not_followed():
    # The inner call's relation covers its primary output only: another
    # tensor it made and returned (here its attention's value input) holds
    # positions the outer call's data flow cannot see, so the outer call's
    # dependencies are unavailable, never "same_position" from the residual.
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = SelfAttention()

        def forward(self, x):
            v = x * 2.0
            return self.attn(v, is_causal=True), v.cumsum(dim=1)  # the second: prefix sums over tokens

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            y, made = self.inner(x)
            return y + made

    report = torchscan.crawl_module(Outer().eval(), args=(torch.randn(2, L, E),))
    assert _sources(report, "inner")[0]["relation"] == {"kind": "prefix"}
    _unavailable(report, "", "a tensor made inside inner other than its primary output")


def test_self_attention_padding_next_to_a_residual_is_unavailable():
    class Padded(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = SelfAttention()

        def forward(self, x, keep):
            return x + self.attn(x, keep)

    keep = torch.ones(1, 1, 1, L, dtype=torch.bool)
    keep[..., 3:] = False
    # Output 4 reads keys/values 0..2 and, through the softmax, query 4 (and
    # the residual reads position 4): {0, 1, 2, 4} is no interval, so no
    # named relation, in the attention and in its caller.
    report = torchscan.crawl_module(Padded(), args=(torch.randn(2, L, E), keep))
    _unavailable(report, "attn", "interval")
    _unavailable(report, "", "interval")


def _encoder(batch_first=True, layers=2):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, H, 32, dropout=0.0, batch_first=batch_first)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()


def test_transformer_encoder_stack():
    x = torch.randn(2, L, E)
    # Each layer with the causal mask is a prefix (test_token_dependencies);
    # a prefix of prefixes is a prefix.
    report = torchscan.crawl_module(_encoder(), args=(x,), kwargs={"mask": BLOCKED})
    assert _sources(report) == [{"arguments": ["src"], "sequence_axis": 1, "length": L,
                                 "relation": {"kind": "prefix"}}]
    assert _deps(report, "layers.1")["sources"] == _sources(report)
    # Sequence first (batch_first=False): positions on dim 0.
    report = torchscan.crawl_module(_encoder(False), args=(x.transpose(0, 1),), kwargs={"mask": BLOCKED})
    assert _sources(report) == [{"arguments": ["src"], "sequence_axis": 0, "length": L,
                                 "relation": {"kind": "prefix"}}]
    # No mask: every layer reads all positions: all.
    assert _sources(torchscan.crawl_module(_encoder(), args=(x,)))[0]["relation"] == {"kind": "all"}
    # Key padding in self-attention makes each layer unavailable (a padded
    # position reads itself and keys 0..2): so is the stack, naming a layer.
    padding = torch.zeros(2, L, dtype=torch.bool)
    padding[:, 3:] = True
    report = torchscan.crawl_module(_encoder(), args=(x,), kwargs={"src_key_padding_mask": padding})
    _unavailable(report, "", "layers.")


def test_transformer():
    torch.manual_seed(0)
    model = nn.Transformer(E, H, 2, 2, 32, dropout=0.0, batch_first=True).eval()
    src, tgt = torch.randn(2, S, E), torch.randn(2, L, E)
    report = torchscan.crawl_module(model, args=(src, tgt), kwargs={"tgt_mask": BLOCKED})
    # Encoder without a mask: every memory position reads all of src. The
    # decoder's causal self-attention: tgt prefix; its cross-attention sees
    # all 7 memory positions from every query: all of src.
    assert _sources(report) == [
        {"arguments": ["src"], "sequence_axis": 1, "length": S, "relation": {"kind": "all"}},
        {"arguments": ["tgt"], "sequence_axis": 1, "length": L, "relation": {"kind": "prefix"}},
    ]


def test_sequence_first_custom_modules_need_batch_first():
    class SeqFirst(nn.Module):
        def __init__(self, batch_first=None):
            super().__init__()
            self.attn = SelfAttention()
            if batch_first is not None:
                self.batch_first = batch_first

        def forward(self, x):  # (L, N, E)
            return self.attn(x.transpose(0, 1), is_causal=True).transpose(0, 1)

    x = torch.randn(L, 2, E)
    # Taken as (N, L, E) by default, its "positions" reach attn on the batch
    # dim, where attn's own are on dim 1: unavailable rather than a relation
    # over the wrong axis.
    _unavailable(torchscan.crawl_module(SeqFirst(), args=(x,)), "", "the token axis of its input is dim 1")
    # batch_first=False says dim 0: the causal relation, prefix.
    report = torchscan.crawl_module(SeqFirst(False), args=(x,))
    assert _sources(report) == [{"arguments": ["x"], "sequence_axis": 0, "length": L, "relation": {"kind": "prefix"}}]


def _llama(impl):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = models.tiny_llama_config(transformers, layers=1, attention=impl)
    torch.manual_seed(0)
    x = torch.randn(1, L, 32)
    cos, sin = LlamaRotaryEmbedding(config)(x, torch.arange(L)[None])
    causal = torch.zeros(L, L).masked_fill(BLOCKED, torch.finfo(torch.float32).min)[None, None]
    return LlamaDecoderLayer(config, 0).eval(), x, (cos, sin), causal


@pytest.mark.parametrize("with_mask", [True, False])
def test_llama_sdpa_attention(with_mask):
    layer, x, rotary, causal = _llama("sdpa")
    kwargs = {"position_embeddings": rotary, "attention_mask": causal if with_mask else None}
    report = torchscan.crawl_module(layer, args=(x,), kwargs=kwargs)
    # With the 4-d mask Hugging Face repeats the 2 key/value heads
    # (repeat_kv); without one it sets is_causal and enable_gqa: both causal.
    # hidden_states: prefix (output 0 reads value 0, a projection of x 0).
    # cos/sin rotate q and k at their own positions, not v: output 0 reads
    # v 0 alone (one score), so none of them; output i >= 1 reads q i and k
    # 0..i: prefix from position 1. The decoder layer adds residuals (i) and
    # a per-position MLP: the same relations.
    expected = [
        {"arguments": ["hidden_states"], "sequence_axis": 1, "length": L, "relation": {"kind": "prefix"}},
        {"arguments": ["position_embeddings[0]"], "sequence_axis": 1, "length": L,
         "relation": {"kind": "prefix", "first_position": 1}},
        {"arguments": ["position_embeddings[1]"], "sequence_axis": 1, "length": L,
         "relation": {"kind": "prefix", "first_position": 1}},
    ]
    assert _sources(report, "self_attn") == expected
    assert _sources(report) == expected


def test_llama_eager_attention_is_unavailable():
    layer, x, rotary, causal = _llama("eager")
    report = torchscan.crawl_module(layer, args=(x,), kwargs={"position_embeddings": rotary,
                                                              "attention_mask": causal})
    # Eager attention multiplies q by k^T itself: scores indexed by two token
    # axes, which the pass does not follow: unavailable, naming the product.
    _unavailable(report, "self_attn", "aten::matmul combines tensors whose token positions lie on different dims")
    _unavailable(report, "", "self_attn: aten::matmul")


def test_whole_llama_model_with_its_cache():
    transformers = pytest.importorskip("transformers")
    config = models.tiny_llama_config(transformers)
    torch.manual_seed(0)
    report = torchscan.crawl_module(transformers.LlamaModel(config).eval(),
                                    kwargs={"input_ids": torch.randint(0, 50, (1, L))})
    # Token embeddings are per position; the cache joins its (empty) past
    # with this call's keys along the token axis, which keeps their
    # positions; each layer is a prefix (test_llama_sdpa_attention); the
    # final norm is per position: output i reads input_ids 0..i.
    assert _sources(report) == [{"arguments": ["input_ids"], "sequence_axis": 1, "length": L,
                                 "relation": {"kind": "prefix"}}]
    assert _sources(report, "layers.1")[0]["relation"] == {"kind": "prefix"}


# ---- argument names: Signature.bind's, from a plan cached per call form


def _reference_names(fn, args, kwargs):
    """What token_flow names each tensor argument, derived with
    inspect.signature(fn).bind directly (the definition the cache follows)."""
    import inspect

    try:
        sig = inspect.signature(fn)
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return [f"args[{i}]" for i, v in enumerate(args) if isinstance(v, torch.Tensor)] + [
            k for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    names = []
    for name, value in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            names += [k for k, v in value.items() if isinstance(v, torch.Tensor)]
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            names += [f"{name}[{i}]" for i, v in enumerate(value) if isinstance(v, torch.Tensor)]
        elif isinstance(value, torch.Tensor):
            names.append(name)
    return names


class _Forms(nn.Module):
    def forward(self, x, /, y=None, *rest, mask=None, **extra):
        return x


@pytest.mark.parametrize("args, kwargs", [
    ((1,), {}),
    ((1, 2), {"mask": 3}),
    ((1, 2, 3, 4), {"mask": 5, "z": 6, "w": 7}),
    ((1,), {"w": 7, "y": 2}),                # keywords out of signature order
    ((), {"x": 1}),                          # positional-only passed by keyword: bind refuses
    ((1, None, 3), {"mask": None, "q": 8}),  # None and plain values hold no tensor
])
def test_argument_names_are_those_bind_gives(args, kwargs):
    module = _Forms()
    tensors = {}

    def t(v):  # a distinct tensor per stand-in; plain values stay plain
        if isinstance(v, int) and v is not None:
            return tensors.setdefault(v, torch.full((2,), float(v)))
        return v

    args, kwargs = tuple(t(a) for a in args), {k: t(v) for k, v in kwargs.items()}
    expected = _reference_names(module.forward, args, kwargs)
    for _ in range(2):  # the first call makes the plan, the second uses it
        named = token_flow._named_tensors(module, args, kwargs)
        assert [n for n, _ in named] == expected
        for name, tensor in named:  # each name goes with its own tensor
            assert any(tensor is v for v in (*args, *kwargs.values()))
    # A container argument: its tensors are numbered within it, a tuple of
    # tensors (rotary (cos, sin)) as tree_flatten numbers it, a tuple of one
    # tensor under the argument's own name.
    named = token_flow._named_tensors(module, (t(1), [t(2), t(3)]), {})
    assert [n for n, _ in named] == ["x", "y[0]", "y[1]"]
    named = token_flow._named_tensors(module, (t(1), (t(2), t(3))), {"mask": (t(4),)})
    assert [n for n, _ in named] == ["x", "y[0]", "y[1]", "mask"]
    assert all(v is t(k) for (_, v), k in zip(named, (1, 2, 3, 4)))


def test_the_primary_output_is_tree_flattens_first_tensor():
    from collections import OrderedDict, namedtuple

    from torch.utils._pytree import tree_flatten

    a, b = torch.ones(2, 3), torch.zeros(2, 3)
    pair = namedtuple("pair", "x y")
    cases = [a, (a, b), [None, 1, (b, a)], {"z": b, "a": a}, OrderedDict(h=None, s=(b,)), pair(None, a),
             ((), {}), (1, "x", None), torch.nn.Parameter(a), {"k": [{"m": b}]}]
    for output in cases:
        expected = next((t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor)), None)
        assert token_flow.TokenFlow._primary(output) is expected, output
