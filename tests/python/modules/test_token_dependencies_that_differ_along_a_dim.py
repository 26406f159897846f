"""Token dependencies of tensors that join different inputs along a dim
other than the token axis: the tensor as a whole reads both, but a part
of it may read one (Note [Dependencies that differ along another dim] in
torchscan_dispatch/analyses/token_flow_pass.h). Each expected relation is
derived by hand in the test's comment, as in test_token_flow.py."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchscan

E, L = 8, 3  # features; positions


def _deps(report, path=""):
    return next(layer for layer in report["layers"] if layer["path"] == path)["token_dependencies"]


def _kinds(deps):
    assert deps["status"] == "complete", deps
    return {s["arguments"][0]: s["relation"]["kind"] for s in deps["sources"]}


def _expect(model, expected):
    """expected: the relation kinds by source, or None for unavailable with
    a reason that the dependencies differ."""
    x, y = torch.randn(1, L, E), torch.randn(1, L, E)
    deps = _deps(torchscan.crawl_module(model.eval(), args=(x, y)))
    if expected is None:
        assert deps["status"] == "unavailable" and "differ" in deps["reason"], deps
    else:
        assert _kinds(deps) == expected


def _attend(t):
    # Self-attention over dim -2 without projections: output i reads every
    # position of t (no mask, no causality): relation "all" to what t reads.
    return F.scaled_dot_product_attention(t, t, t)


class Part(nn.Module):
    """x and y (N, L, E) joined on a dim other than the token axis, then
    one part of that dim taken: (how) 'cat0' cats on the batch dim and keeps
    batch element 0, 'stack1' stacks on a new dim 1 and selects its index 0,
    'feat' cats on the features and keeps the first E, 'split' cats on the
    batch dim and splits it, 'whole' keeps all of it."""

    def __init__(self, how):
        super().__init__()
        self.how = how

    def forward(self, x, y):
        if self.how == "cat0":
            part = torch.cat([x, y], 0)[:1]
        elif self.how == "stack1":
            part = torch.stack([x, y], 1)[:, 0]
        elif self.how == "feat":
            part = torch.cat([x, y], -1)[..., :E]
        elif self.how == "split":
            part = torch.cat([x, y], 0).split(1, 0)[0]
        else:
            part = torch.cat([x, y], 0).sum(0, keepdim=True)
        return _attend(part)


@pytest.mark.parametrize("how", ["cat0", "stack1", "feat", "split"])
def test_a_part_of_a_join_of_different_inputs_is_not_claimed_to_read_both(how):
    # The part holds x's values alone; attention over it makes output i read
    # every position of x ("all") and nothing of y ("none"). The pass keeps
    # one dependency per tensor, not per part of a dim, so it cannot say
    # "none" for y: honest is unavailable, not "all" for both.
    x, y = torch.randn(1, L, E), torch.randn(1, L, E)
    deps = _deps(torchscan.crawl_module(Part(how).eval(), args=(x, y)))
    assert deps["status"] == "unavailable", deps
    assert "differ" in deps["reason"], deps


def test_the_whole_of_a_join_reads_both_inputs():
    # The sum over the joined dim reads x and y at every position; attention
    # makes output i read all of both.
    x, y = torch.randn(1, L, E), torch.randn(1, L, E)
    deps = _deps(torchscan.crawl_module(Part("whole").eval(), args=(x, y)))
    assert _kinds(deps) == {"x": "all", "y": "all"}


class Joined(nn.Module):
    """A module returning x and y joined on the batch dim, as one step of
    the module around it."""

    def forward(self, x, y):
        return _attend(torch.cat([x, y], 0))


class Outer(nn.Module):
    """Takes Joined as one step, then keeps batch element 0 (keep=True) or
    the whole of it, and attends again."""

    def __init__(self, keep):
        super().__init__()
        self.inner, self.keep = Joined(), keep

    def forward(self, x, y):
        z = self.inner(x, y)
        return _attend(z[:1] if self.keep else z)


def test_a_known_call_s_joined_output_keeps_its_parts_apart():
    # Joined's output as a whole reads all of x and all of y (batch element 0
    # is attention over x, element 1 over y): complete, "all" for both.
    # Outer keeps element 0, which reads x alone: not "all" for y, so
    # unavailable; Outer's whole output (keep=False) reads all of both.
    x, y = torch.randn(1, L, E), torch.randn(1, L, E)
    report = torchscan.crawl_module(Outer(True).eval(), args=(x, y))
    assert _kinds(_deps(report, "inner")) == {"x": "all", "y": "all"}
    deps = _deps(report)
    assert deps["status"] == "unavailable" and "differ" in deps["reason"], deps
    whole = torchscan.crawl_module(Outer(False).eval(), args=(x, y))
    assert _kinds(_deps(whole)) == {"x": "all", "y": "all"}


class SameInput(nn.Module):
    """x joined with a function of itself on the features (a rotary
    half-swap's pattern), then the first half kept: every part reads x at
    the same positions, so a part is no different from the whole."""

    def forward(self, x):
        return _attend(torch.cat([x, x * 2], -1)[..., :E])


def test_a_join_of_pieces_that_read_the_same_positions_keeps_its_relation():
    # Both pieces read x at position i alone; attention: output i reads all of x.
    deps = _deps(torchscan.crawl_module(SameInput().eval(), args=(torch.randn(1, L, E),)))
    assert _kinds(deps) == {"x": "all"}


@pytest.mark.parametrize("keep", [True, False])
def test_requests_in_json_say_the_same(keep, monkeypatch):
    # The mark travels in the word answer and step (Note [Token-flow requests
    # without JSON]) and in the JSON ones: both give the same report.
    from torchscan import token_flow

    x, y = torch.randn(1, L, E), torch.randn(1, L, E)
    with_words = torchscan.crawl_module(Outer(keep).eval(), args=(x, y))
    monkeypatch.setattr(token_flow, "_native_words", lambda: None)
    with_json = torchscan.crawl_module(Outer(keep).eval(), args=(x, y))
    assert [layer.get("token_dependencies") for layer in with_words["layers"]] == \
        [layer.get("token_dependencies") for layer in with_json["layers"]]


class SlicesItsInput(nn.Module):
    """Keeps batch element 0 of its argument, then attends: as a call of its
    own, its output reads all of z."""

    def forward(self, z):
        return _attend(z[:1])


class JoinsForIt(nn.Module):
    """Joins x and y on the batch dim and hands the join to SlicesItsInput,
    which the analysis takes as one step."""

    def __init__(self):
        super().__init__()
        self.inner = SlicesItsInput()

    def forward(self, x, y):
        return self.inner(torch.cat([x, y], 0))


def test_a_known_call_given_a_join_may_take_a_part_of_it():
    # inner: output i reads all of z ("all"). The root's output is inner's,
    # which reads batch element 0 of the join, x alone: "all" of x, none of
    # y. Composing inner's relation with everything z reads would claim y
    # too, so the root is unavailable, naming the step.
    x, y = torch.randn(1, L, E), torch.randn(1, L, E)
    report = torchscan.crawl_module(JoinsForIt().eval(), args=(x, y))
    assert _kinds(_deps(report, "inner")) == {"z": "all"}
    deps = _deps(report)
    assert deps["status"] == "unavailable" and "inner: its input" in deps["reason"], deps


class PartialRotaryLayer(nn.Module):
    """A decoder layer with a partial rotary embedding (half of each head's
    features rotated by cos, joined on the features with the other half)
    and a fused gate and up projection split in two, as ChatGLM's."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.qkv, self.o = nn.Linear(E, 3 * E), nn.Linear(E, E)
        self.up, self.down = nn.Linear(E, 4 * E), nn.Linear(2 * E, E)

    def forward(self, x, cos):
        n = x.shape[0]
        q, k, v = (t.view(n, L, 2, E // 2).transpose(1, 2) for t in self.qkv(x).split(E, -1))

        def rotate(t):
            return torch.cat([t[..., :2] * cos, t[..., 2:]], -1)

        h = x + self.o(F.scaled_dot_product_attention(rotate(q), rotate(k), v, is_causal=True)
                       .transpose(1, 2).reshape(n, L, E))
        a, g = self.up(h).chunk(2, -1)
        return h + self.down(a * F.silu(g))


def test_a_partial_rotary_layer_with_a_fused_gate_is_complete():
    # Causal attention: output i reads x and cos at positions 0..i (q, k and v
    # are per-position functions of them); the residual, the projections and
    # the gate keep positions: "prefix" for both.
    report = torchscan.crawl_module(PartialRotaryLayer().eval(), args=(torch.randn(1, L, E), torch.randn(1, L, 2)))
    assert _kinds(_deps(report)) == {"x": "prefix", "cos": "prefix"}


class MovesTheJoin(nn.Module):
    """x and y joined on the batch dim (2, L, E), the dims then moved or
    viewed, and a part taken: (how) 'permuted' moves the joined dim last
    and slices the features (now dim 0); 'permuted_join' slices the joined
    dim (now last); 'viewed' splits the features in two and selects one
    half; 'viewed_join' selects batch element 0 after the view; 'summed'
    projects the features of a feature join and splits the result's
    features."""

    def __init__(self, how):
        super().__init__()
        torch.manual_seed(0)
        self.how, self.proj = how, nn.Linear(2 * E, 2 * E)

    def forward(self, x, y):
        z = torch.cat([x, y], 0)
        if self.how == "permuted":
            part = z.permute(2, 1, 0)[: E // 2].permute(2, 1, 0)
        elif self.how == "permuted_join":
            part = z.permute(2, 1, 0)[..., :1].permute(2, 1, 0)
        elif self.how == "viewed":
            part = z.view(2, L, 2, E // 2)[:, :, 0]
        elif self.how == "viewed_join":
            part = z.view(2, L, 2, E // 2)[0]
        else:
            part = self.proj(torch.cat([x, y], -1)).chunk(2, -1)[0]
        return _attend(part)


@pytest.mark.parametrize("how,expected", [
    # A part along dims the join did not mark: batch element 0 of the whole
    # still reads x and element 1 reads y, and attention makes every output
    # position read all of both.
    ("permuted", {"x": "all", "y": "all"}),
    ("viewed", {"x": "all", "y": "all"}),
    # The projection sums over the joined features: each output feature reads
    # x and y at its position, attention then all of both.
    ("summed", {"x": "all", "y": "all"}),
    # A part of the joined dim, wherever it moved: x alone, not said.
    ("permuted_join", None),
    ("viewed_join", None),
])
def test_the_mark_follows_the_joined_dim(how, expected):
    _expect(MovesTheJoin(how), expected)


class Picks(nn.Module):
    """torch.where with a constant condition that picks x in the first half
    of the features and y in the second (varies='features'), or x in batch
    element 0 and y in element 1 of a batch of two (varies='batch'); then
    the first half or element 0 (part=True), or the whole."""

    def __init__(self, varies, part):
        super().__init__()
        self.varies, self.part = varies, part

    def forward(self, x, y):
        if self.varies == "features":
            t = torch.where(torch.arange(E) < E // 2, x, y)
            return _attend(t[..., : E // 2] if self.part else t)
        t = torch.where(torch.tensor([True, False]).view(2, 1, 1), x.expand(2, L, E), y.expand(2, L, E))
        return _attend(t[:1] if self.part else t)


@pytest.mark.parametrize("varies", ["features", "batch"])
def test_where_picks_parts_like_a_join(varies):
    # The part holds x's values alone: "all" of x, none of y, which the pass
    # cannot say, so unavailable. The whole reads x in some elements and y
    # in others at every position: attention makes it "all" of both.
    x, y = torch.randn(1, L, E), torch.randn(1, L, E)
    deps = _deps(torchscan.crawl_module(Picks(varies, True).eval(), args=(x, y)))
    assert deps["status"] == "unavailable" and "differ" in deps["reason"], deps
    whole = _deps(torchscan.crawl_module(Picks(varies, False).eval(), args=(x, y)))
    assert _kinds(whole) == {"x": "all", "y": "all"}


class MoreParts(nn.Module):
    """More ways a join's parts travel: (how) 'values' attends with the join
    of x and y on the features as the values, then keeps x's features;
    'glu' gates a join of x, y, x, x on the features (output k reads
    features k and k + 2E) and keeps the first E; 'masked' adds x to y
    with y's first half of the features zeroed by masked_fill and keeps that
    half; 'repeated' repeats a batch join three times on a new leading dim,
    keeps the first copy and sums it over the batch (reading both)."""

    def __init__(self, how):
        super().__init__()
        self.how = how

    def forward(self, x, y):
        if self.how == "values":
            return F.scaled_dot_product_attention(x, x, torch.cat([x, y], -1), is_causal=True)[..., :E]
        if self.how == "glu":
            return _attend(F.glu(torch.cat([x, y, x, x], -1), -1)[..., :E])
        if self.how == "masked":
            return _attend((x + y.masked_fill(torch.arange(E) < E // 2, 0.0))[..., : E // 2])
        return _attend(torch.cat([x, y], 0).repeat(3, 1, 1, 1)[:1].sum(1))


@pytest.mark.parametrize("how,expected", [
    # Output i reads values 0..i (causal), x's features alone: "prefix" of
    # x, none of y: not said, so unavailable.
    ("values", None),
    # glu(cat([x, y, x, x]))[..., :E] is x * sigmoid(x): all of x, none of y.
    ("glu", None),
    # The kept half is x + 0: all of x, none of y.
    ("masked", None),
    # The first copy, summed over the batch, reads x and y at each position:
    # attention makes it "all" of both.
    ("repeated", {"x": "all", "y": "all"}),
])
def test_marks_through_attention_values_gates_fills_and_repeats(how, expected):
    _expect(MoreParts(how), expected)


class PicksPositions(nn.Module):
    """torch.where (or masked_fill) with a constant condition that varies
    along the token axis: position 1 takes y, the others x (masked_fill:
    position 1 of x zeroed, then y added)."""

    def __init__(self, fill):
        super().__init__()
        self.fill = fill

    def forward(self, x, y):
        keep = (torch.arange(L) != 1).view(L, 1)
        t = x.masked_fill(~keep, 0.0) + y if self.fill else torch.where(keep, x, y)
        return _attend(t)


@pytest.mark.parametrize("fill", [False, True])
def test_a_condition_along_the_token_axis_is_unavailable(fill):
    # where: position 1 holds y alone, the others x alone; attention makes
    # every output read x at positions 0, 2 and 3, which is none of the
    # relations the schema names ("all" would claim position 1). masked_fill
    # zeroes x's position 1 before y is added: the same for x. Unavailable.
    x, y = torch.randn(1, L, E), torch.randn(1, L, E)
    deps = _deps(torchscan.crawl_module(PicksPositions(fill).eval(), args=(x, y)))
    assert deps["status"] == "unavailable" and "condition that varies along the token axis" in deps["reason"], deps
