"""The native token analysis answers only for layers as PyTorch builds them
(Note [Native layers as PyTorch builds them] in torchscan/tokens.py). Every
changed layer below runs with a causal mask, where the native analysis,
reading the mask alone, says "prefix"; the hand derivation in each case
says what the call really depends on. A changed layer must be reported
with its true relation or as unavailable, never with the native one."""
import pytest
import torch
import torch.nn as nn

import torchscan

L, E = 6, 16
CAUSAL = torch.ones(L, L, dtype=torch.bool).triu(1)  # True: blocked (key j > query i)


def _root(model, *args, **kwargs):
    deps = torchscan.crawl_module(model.eval(), args=args, kwargs=kwargs)["layers"][0]["token_dependencies"]
    return deps["status"], [s["relation"]["kind"] for s in deps.get("sources", [])]


def _encoder(**options):
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(E, 2, 32, batch_first=True, **options)


class _LaterPositions(nn.Module):
    """Position i of the output sums the input's positions i..L-1."""

    def forward(self, x):
        return x.flip(1).cumsum(1).flip(1)


class _CausalBlock(nn.TransformerEncoderLayer):
    """Ignores the mask it is given: its attention is always causal."""

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal=False):
        return super()._sa_block(x, torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1), None)


def _with_attention_forward(model, mask):
    """The attention's forward replaced on the instance: it runs with `mask`
    whatever it is given."""
    attention = model.self_attn if hasattr(model, "self_attn") else model
    native = attention.forward
    # The parameters keep the native names: the call binds as a native one would.
    attention.forward = lambda query, key, value, **kw: native(query, key, value, **{**kw, "attn_mask": mask})
    return model


def _changed(name):
    if name == "activation that mixes positions":
        return _encoder(activation=_LaterPositions())
    if name == "function activation that mixes positions":
        return _encoder(activation=lambda t: t.flip(1).cumsum(1).flip(1))
    if name == "linear layer that mixes positions":
        model = _encoder()
        model.linear1 = nn.Sequential(nn.Linear(E, 32), _LaterPositions())
        return model
    if name == "layer norm over positions and features":
        model = _encoder()
        model.norm1 = nn.LayerNorm((L, E))
        return model
    if name == "attention forward replaced on the instance":
        return _with_attention_forward(_encoder(), None)
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["activation that mixes positions", "function activation that mixes positions",
                                  "linear layer that mixes positions", "layer norm over positions and features",
                                  "attention forward replaced on the instance"])
def test_changed_encoder_layers_are_not_answered_natively(name):
    """Causal attention, then a part that reads later positions (the
    activation, the linear layer), all positions (the layer norm over
    (L, E)), or attention without the mask (the replaced forward): output
    i depends on every position, relation "all"."""
    x = torch.randn(2, L, E)
    status, relations = _root(_changed(name), x, src_mask=CAUSAL, is_causal=True)
    assert status != "complete" or relations == ["all"], (status, relations)


def test_a_subclass_that_overrides_a_block_is_followed_through_its_operators():
    """_CausalBlock attends causally whatever mask it is given: with no
    mask, output i depends on positions 0..i, relation "prefix" (the
    native analysis of an unmasked layer says "all")."""
    torch.manual_seed(0)
    status, relations = _root(_CausalBlock(E, 2, 32, batch_first=True), torch.randn(2, L, E))
    assert status != "complete" or relations == ["prefix"], (status, relations)


def test_attention_whose_forward_is_replaced_on_the_instance():
    """The forward is made causal on the instance: output i depends on keys
    0..i ("prefix"), while the call passes no mask ("all" natively)."""
    torch.manual_seed(0)
    model = _with_attention_forward(nn.MultiheadAttention(E, 2, batch_first=True), CAUSAL)
    x = torch.randn(2, L, E)
    status, relations = _root(model, x, x, x)
    assert status != "complete" or relations == ["prefix"] * 3, (status, relations)


@pytest.mark.parametrize("options", [{}, {"activation": "gelu"}, {"activation": nn.GELU()}, {"norm_first": True}])
def test_layers_as_pytorch_builds_them_are_answered_natively(options):
    """The standard layer with a causal mask: output i depends on positions
    0..i through attention, and the rest keeps positions apart: "prefix"."""
    x = torch.randn(2, L, E)
    assert _root(_encoder(**options), x, src_mask=CAUSAL, is_causal=True) == ("complete", ["prefix"])
