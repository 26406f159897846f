"""Token dependencies of calls whose token axis has one position: a decoding
step's query (one token, batch 1), where views cannot tell the size-1 dims
apart (Note [A token axis of one position] in
torchscan_dispatch/analyses/token_flow_rules.cc). Each expected relation is
derived by hand in the test's comment, as in test_token_flow.py."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchscan
from tests.fixtures import models

E, D = 16, 4  # features; features per head


def _sources(report, path=""):
    deps = next(l for l in report["layers"] if l["path"] == path)["token_dependencies"]
    assert deps["status"] == "complete", deps
    return deps["sources"]


def _source(name, length, kind, axis=1):
    return {"arguments": [name], "sequence_axis": axis, "length": length, "relation": {"kind": kind}}


class Attention(nn.Module):
    """Query heads split off the features ((N, L, E) -> (N, L, H, D) ->
    (N, H, L, D)), key/value heads `kv` of them, a past of keys and values
    (N, kv, P, D) joined before this call's on the token axis, SDPA, the
    heads merged back."""

    def __init__(self, heads, kv):
        super().__init__()
        torch.manual_seed(0)
        self.heads, self.kv = heads, kv
        self.q, self.k, self.v = nn.Linear(E, heads * D), nn.Linear(E, kv * D), nn.Linear(E, kv * D)

    def forward(self, x, past_k=None, past_v=None):
        n, length, _ = x.shape
        q = self.q(x).view(n, length, self.heads, D).transpose(1, 2)
        k = self.k(x).view(n, length, self.kv, D).transpose(1, 2)
        v = self.v(x).view(n, length, self.kv, D).transpose(1, 2)
        if past_k is not None:
            k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, enable_gqa=self.kv != self.heads)
        return y.transpose(1, 2).reshape(n, length, self.heads * D)


@pytest.mark.parametrize("heads,kv", [(4, 4), (1, 1), (4, 1)])
@pytest.mark.parametrize("batch", [1, 2])
def test_one_token_attends_to_itself(heads, kv, batch):
    # One query, one key: output 0 reads value 0 alone (a softmax over one
    # score is 1), a projection of x 0: same_position. With batch 1 and one
    # token, (1, 1, E) viewed as (1, 1, H, D) holds the token on dim 1, not
    # dim 0; with one head, (1, 1, 1, D) after the transpose too.
    report = torchscan.crawl_module(Attention(heads, kv).eval(), args=(torch.randn(batch, 1, E),))
    assert _sources(report) == [_source("x", 1, "same_position")]
    assert report["totals"]["operator_flops"]["status"] == "complete"


class HeadsInBatch(nn.Module):
    """Heads folded into the batch dim, (N * H, L, D), as older attention
    code keeps them, and unfolded to (N, H, L, D) for SDPA: with batch 1,
    one head and one token, a view cannot tell which size-1 dim the token
    is on, and attention takes it on its dim -2."""

    def __init__(self, heads):
        super().__init__()
        torch.manual_seed(0)
        self.heads, self.qkv = heads, nn.Linear(E, 3 * heads * D)

    def forward(self, x):
        n, length, _ = x.shape
        folded = [t.view(n, length, self.heads, D).permute(0, 2, 1, 3).reshape(n * self.heads, length, D)
                  for t in self.qkv(x).chunk(3, dim=-1)]
        q, k, v = (t.view(n, self.heads, length, D) for t in folded)
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, length, self.heads * D)


@pytest.mark.parametrize("heads", [1, 4])
def test_one_token_with_heads_folded_into_the_batch(heads):
    # As test_one_token_attends_to_itself: output 0 reads value 0 alone.
    report = torchscan.crawl_module(HeadsInBatch(heads).eval(), args=(torch.randn(1, 1, E),))
    assert _sources(report) == [_source("x", 1, "same_position")]


@pytest.mark.parametrize("heads,kv", [(4, 4), (4, 1)])
@pytest.mark.parametrize("batch", [1, 2])
def test_a_decoding_step_reads_the_whole_past(heads, kv, batch):
    past = 5
    past_k, past_v = torch.randn(batch, kv, past, D), torch.randn(batch, kv, past, D)
    report = torchscan.crawl_module(Attention(heads, kv).eval(), args=(torch.randn(batch, 1, E), past_k, past_v))
    # The keys are the 5 past ones, then this call's (position 5). The query
    # sees all 6 (no mask): output 0 reads every value and, through the
    # softmax over 6 scores, every key and query 0. x 0 is this call's query,
    # key and value: same_position; the past keys and values (token axis
    # dim -2 = 2 of a 4-d tensor), all 5 positions: all.
    assert _sources(report) == [_source("x", 1, "same_position"), _source("past_k", past, "all", axis=2),
                                _source("past_v", past, "all", axis=2)]


class Packed(nn.Module):
    """One token's query heads packed into the rows of their key/value head
    ((1, H, 1, D) -> (1, KV, H / KV, D)) for SDPA with a mask, and unpacked
    after, as Hugging Face's SDPA attention decodes a grouped-query model
    with an attention mask."""

    def __init__(self, kv):
        super().__init__()
        torch.manual_seed(0)
        self.kv, self.q, self.k, self.v = kv, nn.Linear(E, 4 * D), nn.Linear(E, kv * D), nn.Linear(E, kv * D)

    def forward(self, x, past_k, past_v, mask):
        n, length, _ = x.shape
        q = self.q(x).view(n, length, 4, D).transpose(1, 2).reshape(n, self.kv, 4 // self.kv, D)
        k = torch.cat([past_k, self.k(x).view(n, length, self.kv, D).transpose(1, 2)], dim=2)
        v = torch.cat([past_v, self.v(x).view(n, length, self.kv, D).transpose(1, 2)], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return y.reshape(n, 4, length, D).transpose(1, 2).reshape(n, length, 4 * D)


@pytest.mark.parametrize("kv", [1, 2])
def test_query_heads_packed_into_the_rows_are_one_position(kv):
    past = 3
    mask = torch.ones(1, 1, 1, past + 1, dtype=torch.bool)  # every key visible to every packed row
    report = torchscan.crawl_module(Packed(kv).eval(), args=(torch.randn(1, 1, E), torch.randn(1, kv, past, D),
                                                            torch.randn(1, kv, past, D), mask))
    # Each packed row is a head of the one query; each sees all 4 keys (3
    # past, then this call's): it reads every value and, through the softmax
    # over 4 scores, every key and the query. So the one output position
    # reads x 0 (same_position) and the whole past (all).
    assert _sources(report) == [_source("x", 1, "same_position"), _source("past_k", past, "all", axis=2),
                                _source("past_v", past, "all", axis=2)]


class SingleHead(nn.Module):
    """One head made with unsqueeze ((N, L, E) -> (N, 1, L, E)), the past
    joined on dim 2, the head taken away again with squeeze."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v = nn.Linear(E, E), nn.Linear(E, E), nn.Linear(E, E)

    def forward(self, x, past_k, past_v):
        q = self.q(x).unsqueeze(1)
        k = torch.cat([past_k, self.k(x).unsqueeze(1)], dim=2)
        v = torch.cat([past_v, self.v(x).unsqueeze(-3)], dim=2)
        return F.scaled_dot_product_attention(q, k, v).squeeze(1)


def test_unsqueeze_and_squeeze_place_one_position_by_the_dim_they_name():
    past = 3
    report = torchscan.crawl_module(SingleHead().eval(), args=(torch.randn(1, 1, E), torch.randn(1, 1, past, E),
                                                               torch.randn(1, 1, past, E)))
    # (1, 1, E).unsqueeze(1) puts the new dim before the token's (dim 1 ->
    # 2), where the join with the past needs it. As in
    # test_a_decoding_step_reads_the_whole_past: x same_position, the past
    # all. The output (1, 1, E) after squeeze(1) has its position on dim 1.
    assert _sources(report) == [_source("x", 1, "same_position"), _source("past_k", past, "all", axis=2),
                                _source("past_v", past, "all", axis=2)]
    assert report["layers"][0]["token_dependencies"]["output"] == {"sequence_axis": 1, "length": 1}


def test_a_llama_decoding_step_is_complete():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(models.tiny_llama_config(transformers)).eval()
    with torch.no_grad():
        prefill = model(input_ids=torch.randint(0, 50, (1, 6)), use_cache=True)
    token = prefill.logits[:, -1:].argmax(-1)
    report = torchscan.crawl_module(model, kwargs={"input_ids": token, "past_key_values": prefill.past_key_values,
                                                   "use_cache": True})
    # One new token: each layer's attention reads its own hidden state (its
    # query, and its key and value next to the cached ones), so does the
    # per-position MLP, and the model's output reads input_ids 0, the only
    # position: same_position throughout. The cached keys and values are
    # inside the cache object, which is no tensor argument.
    assert _sources(report) == [_source("input_ids", 1, "same_position")]
    for layer in ("model.layers.0", "model.layers.1"):
        assert _sources(report, f"{layer}.self_attn")[0] == _source("hidden_states", 1, "same_position")
    deps = next(l for l in report["layers"] if l["path"] == "model.layers.0.self_attn")["token_dependencies"]
    assert deps["output"] == {"sequence_axis": 1, "length": 1}  # where the hidden state has its one position


@pytest.mark.parametrize("decoding", [False, True])
def test_gpt2_one_token(decoding):
    transformers = pytest.importorskip("transformers")
    model = transformers.GPT2Model(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=50,
                                                           attn_implementation="sdpa")).eval()
    torch.manual_seed(0)
    kwargs = {"input_ids": torch.randint(0, 50, (1, 1))}
    if decoding:
        with torch.no_grad():
            kwargs["past_key_values"] = model(input_ids=torch.randint(0, 50, (1, 6)), use_cache=True).past_key_values
        kwargs["use_cache"] = True
    report = torchscan.crawl_module(model, kwargs=kwargs)
    # GPT-2's projections flatten batch and tokens ((1, 1, E) -> (1, E)) and
    # unflatten them after the product ((1, 3E) -> (1, 1, 3E)): the one
    # position comes back on dim 1. Every block reads its own position (a
    # one-position attention, or one query over the cached keys and its own),
    # so the model's output reads input_ids 0: same_position.
    assert _sources(report) == [_source("input_ids", 1, "same_position")]
    for block in ("h.0", "h.1"):
        assert _sources(report, block)[0] == _source("hidden_states", 1, "same_position")


class Explicit(nn.Module):
    """Attention written with products: scores of one query against the past
    keys and its own, a softmax over them, the values summed."""

    def __init__(self, elementwise):
        super().__init__()
        torch.manual_seed(0)
        self.elementwise, self.q, self.k = elementwise, nn.Linear(E, E), nn.Linear(E, E)

    def forward(self, x, past):
        q, k = self.q(x), torch.cat([past, self.k(x)], dim=1)
        if self.elementwise:  # (N, 1, 1, E) * (N, 1, S, E), summed over the features
            scores = (q.unsqueeze(2) * k.unsqueeze(1)).sum(-1)
        else:
            scores = q @ k.transpose(1, 2)
        return torch.softmax(scores, dim=-1) @ k


@pytest.mark.parametrize("elementwise,reason", [
    (False, "aten::matmul combines tensors whose token positions lie on different dims"),
    (True, "aten::softmax normalises over the token axis; not followed")])
def test_explicit_attention_of_one_query_is_unavailable(elementwise, reason):
    report = torchscan.crawl_module(Explicit(elementwise).eval(), args=(torch.randn(1, 1, E), torch.randn(1, 4, E)))
    # The scores pair the query (one position) with each of the 5 keys, which
    # the pass does not follow into the products after them: unavailable, not
    # left out, as the call ran a softmax over scores of two token-indexed
    # tensors. The product says so itself; elementwise, the pairing of the
    # one query with the keys on another dim says it, and the softmax over
    # the keys is where the positions are lost.
    deps = report["layers"][0]["token_dependencies"]
    assert deps["status"] == "unavailable" and deps["reason"].startswith(reason), deps
    assert "sources" not in deps


class SeqFirstPast(nn.Module):
    """A sequence-first (L, E) input given its batch dim by a view, joined
    after a buffer of 3 past positions on dim 0, and the past taken back."""

    def __init__(self):
        super().__init__()
        self.register_buffer("past", torch.randn(3, 1, E))

    def forward(self, x):
        F.scaled_dot_product_attention(x[None], x[None], x[None])  # makes the call one the pass analyses
        return torch.cat([self.past, x.view(x.shape[0], 1, E)], dim=0)[:3]


def test_one_position_joined_with_a_past_on_a_dim_its_place_cannot_tell_is_unavailable():
    # Two tokens: the join is along x's token axis (dim 0), and the output
    # is the buffer's 3 positions, which read no position of x: none.
    two = torchscan.crawl_module(SeqFirstPast().eval(), args=(torch.randn(2, E),))
    assert _sources(two) == [_source("x", 2, "none", axis=0)]
    # One token: (1, E) viewed as (1, 1, E) could hold it on dim 0 or 1; a
    # join along dim 0 then either adds a position or widens the one
    # position, which read different inputs. Unavailable, not a guess.
    deps = torchscan.crawl_module(SeqFirstPast().eval(), args=(torch.randn(1, E),))["layers"][0]["token_dependencies"]
    assert deps["status"] == "unavailable" and "joins one position along a size-1 dim" in deps["reason"], deps


class Transposed(nn.Module):
    def forward(self, x):  # (N, L, E) -> SDPA -> (L, N, E)
        return F.scaled_dot_product_attention(x, x, x, is_causal=True).transpose(0, 1)


class AfterAPast(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Transposed()
        self.register_buffer("past", torch.randn(3, 1, E))

    def forward(self, x):
        return torch.cat([self.past, self.inner(x)], dim=0)[:3]


def test_a_known_call_s_one_position_output_stays_on_its_own_dim():
    report = torchscan.crawl_module(AfterAPast().eval(), args=(torch.randn(1, 1, E),))
    # The inner call's output (1, 1, E) holds x's one position on dim 0, where
    # the transpose put it (x has it on dim 1). The outer call joins the past
    # before it on dim 0 and keeps the past's 3 positions: x none.
    inner = next(l for l in report["layers"] if l["path"] == "inner")["token_dependencies"]
    assert inner["output"] == {"sequence_axis": 0, "length": 1}
    assert _sources(report) == [_source("x", 1, "none")]


class RowsNotHeads(nn.Module):
    """One token's query broadcast over 4 learned rows, causal attention over
    4 keys of y, one row taken after."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.rows = nn.Parameter(torch.randn(1, 1, 4, E))

    def forward(self, x, y):
        k = y.unsqueeze(1)
        return F.scaled_dot_product_attention(x.view(1, 1, 1, E) + self.rows, k, k, is_causal=True)[:, :, 0]


def test_rows_of_one_position_that_read_different_keys_are_unavailable():
    # Row i sees keys 0..i: the rows are not one position's packed heads, and
    # taking their union would say the output (row 0) reads every key.
    report = torchscan.crawl_module(RowsNotHeads().eval(), args=(torch.randn(1, 1, E), torch.randn(1, 4, E)))
    deps = report["layers"][0]["token_dependencies"]
    assert deps["status"] == "unavailable" and "read different keys" in deps["reason"], deps


class RotateHalf(nn.Module):
    """A rotary embedding's half swap on one token: cat of two pieces of the
    same position along the features."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(E, E)

    def forward(self, x):
        q = self.q(x).view(1, 1, 4, D).transpose(1, 2)[..., :2]  # (1, 4, 1, 2): one feature per half
        r = torch.cat((-q[..., 1:], q[..., :1]), dim=-1)
        return F.scaled_dot_product_attention(r, r, r)


def test_pieces_of_one_position_joined_on_a_size_1_dim_are_that_position():
    # Every piece is x's one position: so is the join. Output 0 reads value 0
    # alone (one score): x same_position.
    report = torchscan.crawl_module(RotateHalf().eval(), args=(torch.randn(1, 1, E),))
    assert _sources(report) == [_source("x", 1, "same_position")]


class TwoInputsJoined(nn.Module):
    """Two sequence-first (L, E) inputs, each given a batch dim by a view,
    joined on dim 0 (x's positions, then y's), x's part taken back; `stack`
    stacks them on a new dim instead and takes x's."""

    def __init__(self, stack=False):
        super().__init__()
        self.stack = stack

    def forward(self, x, y):
        F.scaled_dot_product_attention(x[None], x[None], x[None])  # makes the call one the pass analyses
        n = x.shape[0]
        if self.stack:
            return torch.stack([x, y], dim=0)[0]
        return torch.cat([x.view(n, 1, E), y.view(n, 1, E)], dim=0)[:n]


@pytest.mark.parametrize("stack", [False, True])
def test_pieces_of_different_positions_joined_on_a_size_1_dim_are_unavailable(stack):
    # With one token each, the pieces' size-1 dims cannot say whether the
    # join lines up positions (x's, then y's: the output reads x alone) or
    # features of one position (it reads both): unavailable.
    x, y = torch.randn(1, E), torch.randn(1, E)
    deps = torchscan.crawl_module(TwoInputsJoined(stack).eval(), args=(x, y))["layers"][0]["token_dependencies"]
    assert deps["status"] == "unavailable" and "joins one position along a size-1 dim" in deps["reason"], deps


class AttentionThenJoin(nn.Module):
    """A sequence-first nn.MultiheadAttention on x, joined on dim 0 with y
    (given a batch dim by a view), the attention's positions taken back."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.mha = nn.MultiheadAttention(E, 2)

    def forward(self, x, y):
        n = x.shape[0]
        h = x.view(n, 1, E)
        out = self.mha(h, h, h, need_weights=False)[0]
        return torch.cat([out, y.view(n, 1, E)], dim=0)[:n]


def test_one_position_joined_along_a_known_token_axis_is_one_position_of_it():
    # The attention's output holds its positions on dim 0 (sequence-first),
    # so the join is along the token axis; y's one position, put on dim 1 by
    # its view, is the next position there. The output keeps the attention's
    # one position: it reads x 0 (same_position) and no position of y.
    report = torchscan.crawl_module(AttentionThenJoin().eval(), args=(torch.randn(1, E), torch.randn(1, E)))
    assert _sources(report) == [_source("x", 1, "same_position", axis=0), _source("y", 1, "none", axis=0)]
