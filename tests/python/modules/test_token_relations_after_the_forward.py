"""Token relations asked once the forward returned (Note [Token relations
asked after the forward] in python_shim/torchscan/token_flow.py): each call's
masks are read as they were when it ran, and a call inside that turns out
to have no relation leaves the enclosing call's answer as it was when
every request was asked right after its call. Expected relations are
derived by hand in the comments."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchscan
from torchscan import token_flow

E, L = 4, 5  # features; positions


def _layer(report, path):
    return next(layer for layer in report["layers"] if layer["path"] == path)


def _kinds(deps):
    assert deps["status"] == "complete", deps
    return {s["arguments"][0]: s["relation"]["kind"] for s in deps["sources"]}


class Attend(nn.Module):
    def forward(self, x, mask):
        return F.scaled_dot_product_attention(x, x, x, attn_mask=mask)


class ChangesTheMaskAfterwards(nn.Module):
    """Runs attention with a causal mask, then makes the mask let every key
    through once the attention call has returned."""

    def __init__(self):
        super().__init__()
        self.attend = Attend()

    def forward(self, x):
        mask = torch.ones(L, L, dtype=torch.bool).tril()
        y = self.attend(x, mask)
        mask.fill_(True)
        return y + 0


def test_a_mask_written_after_its_call_returned_is_read_as_the_call_ran_with_it():
    # When `attend` ran, its boolean mask let query i through to keys 0..i
    # (tril): output i reads positions 0..i of x, the relation "prefix". The
    # root takes that call as one step and adds a constant: "prefix" too.
    # Read once the forward returned, the mask would let every key through
    # ("all").
    report = torchscan.crawl_module(ChangesTheMaskAfterwards().eval(), args=(torch.randn(1, L, E),))
    assert _kinds(_layer(report, "attend")["token_dependencies"]) == {"x": "prefix"}
    assert _kinds(_layer(report, "")["token_dependencies"]) == {"x": "prefix"}


class Softmax(nn.Module):
    def forward(self, scores):
        return scores.softmax(-1)


class ExplicitAttention(nn.Module):
    """Attention written with products; its softmax is a module of its own."""

    def __init__(self):
        super().__init__()
        self.softmax = Softmax()

    def forward(self, x):
        scores = x @ x.transpose(-1, -2)
        return self.softmax(scores) @ x


def test_a_softmax_call_that_is_no_attention_leaves_the_enclosing_answer_as_it_was():
    # `softmax` ran a softmax and no attention: asked, its answer shows no
    # product of two token-indexed tensors, so it has no relation and is no
    # known call of the root. The root's own calls multiply x by its
    # transpose (two token axes in one product): attention written with
    # products, which the analysis says it does not follow. The root's
    # flags were read without `softmax`'s calls (a known call to be) and
    # are read again over them.
    report = torchscan.crawl_module(ExplicitAttention().eval(), args=(torch.randn(1, L, E),))
    assert "token_dependencies" not in _layer(report, "softmax")
    deps = _layer(report, "")["token_dependencies"]
    assert deps["status"] == "unavailable" and "explicit products" in deps["reason"], deps


def test_the_requests_are_asked_after_the_forward_returned(monkeypatch):
    model = ChangesTheMaskAfterwards().eval()
    returned, asked = [], []
    model.register_forward_hook(lambda *_: returned.append(True))
    ask = token_flow._WordRequests.ask

    def noted(self, *args, **kwargs):
        asked.append(bool(returned))
        return ask(self, *args, **kwargs)

    monkeypatch.setattr(token_flow._WordRequests, "ask", noted)
    report = torchscan.crawl_module(model, args=(torch.randn(1, L, E),))
    assert asked and all(asked), asked  # both calls', once the root's forward was over
    assert _layer(report, "")["token_dependencies"]["status"] == "complete"


def test_an_interrupt_while_the_relations_are_asked_leaves_nothing_behind(monkeypatch):
    model = ChangesTheMaskAfterwards().train()
    x = torch.randn(1, L, E)
    expected = torchscan.crawl_module(model, args=(x,))

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(token_flow._WordRequests, "ask", interrupted)
        with pytest.raises(KeyboardInterrupt):
            torchscan.crawl_module(model, args=(x,))
    for module in model.modules():
        assert module.training  # restored
        assert not module._forward_pre_hooks and not module._forward_hooks
    # Recording is neither paused nor left running: the next crawl counts
    # and analyses as the first did.
    again = torchscan.crawl_module(model, args=(x,))
    assert [(l["path"], l["metrics"], l.get("token_dependencies")) for l in again["layers"]] == \
        [(l["path"], l["metrics"], l.get("token_dependencies")) for l in expected["layers"]]
    assert again["totals"] == expected["totals"]


def test_a_call_whose_analysis_fails_is_unavailable_and_the_crawl_goes_on(monkeypatch):
    # A failure while the post-hook takes the call, then one while its
    # relation is asked: each makes that call's tokens unavailable, saying
    # so, and neither fails the crawl or changes its counts.
    x = torch.randn(1, L, E)
    expected = torchscan.crawl_module(ChangesTheMaskAfterwards().eval(), args=(x,))
    named, ask = token_flow._named_tensors, token_flow._WordRequests.ask

    def named_fails(module, args, kwargs):
        if isinstance(module, Attend):
            raise RuntimeError("no names")
        return named(module, args, kwargs)

    def ask_fails(self, scope, path, *args, **kwargs):
        if path == "attend":
            raise ValueError("no answer")
        return ask(self, scope, path, *args, **kwargs)

    for name, replacement, why in (("_named_tensors", named_fails, "RuntimeError: no names"),
                                   ("ask", ask_fails, "ValueError: no answer")):
        with monkeypatch.context() as m:
            m.setattr(token_flow if name == "_named_tensors" else token_flow._WordRequests, name, replacement)
            report = torchscan.crawl_module(ChangesTheMaskAfterwards().eval(), args=(x,))
        deps = _layer(report, "attend")["token_dependencies"]
        assert deps["status"] == "unavailable" and deps["reason"] == f"the analysis failed ({why})", deps
        assert any(d["code"] == "token_dependencies_unavailable" and d["path"] == "attend"
                   for d in report["diagnostics"])
        # The root is no longer told what `attend` reads: its own pass meets
        # the attention, whose mask the root made inside (unknown to it).
        assert _layer(report, "")["token_dependencies"]["status"] == "unavailable"
        assert report["totals"] == expected["totals"]


class AttendAll(nn.Module):
    def forward(self, x):
        return F.scaled_dot_product_attention(x, x, x)


class ShrinksItsInputAfterwards(nn.Module):
    """Runs attention over a copy of x, then resizes that copy in place to
    two positions once the attention call has returned."""

    def __init__(self):
        super().__init__()
        self.attend = AttendAll()

    def forward(self, x):
        h = x.clone()
        y = self.attend(h)
        h.resize_(1, 2, E)
        return y


def test_an_argument_resized_after_its_call_returned_keeps_the_length_the_call_ran_with():
    # `attend` ran unmasked attention over h of L positions: output i reads
    # every position of h, "all" over length L. The post-hook takes h's
    # sizes; read once the forward returned, h would have 2 positions.
    report = torchscan.crawl_module(ShrinksItsInputAfterwards().eval(), args=(torch.randn(1, L, E),))
    deps = _layer(report, "attend")["token_dependencies"]
    assert _kinds(deps) == {"x": "all"}
    assert deps["sources"][0]["length"] == L and deps["output"]["length"] == L


def test_a_failure_naming_the_arguments_once_the_forward_returned_is_said(monkeypatch):
    # A call without masks has its arguments named once the forward
    # returned: a failure there makes that call unavailable, saying so, and
    # leaves the crawl's counts as they were.
    x = torch.randn(1, L, E)
    expected = torchscan.crawl_module(ShrinksItsInputAfterwards().eval(), args=(x,))
    named = token_flow._named

    def fails(module, *args):
        if isinstance(module, AttendAll):
            raise RuntimeError("no names")
        return named(module, *args)

    monkeypatch.setattr(token_flow, "_named", fails)
    report = torchscan.crawl_module(ShrinksItsInputAfterwards().eval(), args=(x,))
    deps = _layer(report, "attend")["token_dependencies"]
    assert deps["status"] == "unavailable" and deps["reason"] == "the analysis failed (RuntimeError: no names)"
    assert any(d["code"] == "token_dependencies_unavailable" and d["path"] == "attend" for d in report["diagnostics"])
    assert report["totals"] == expected["totals"]
