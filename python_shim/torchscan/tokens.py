"""Token dependencies of native attention and Transformer calls.

For each call of nn.MultiheadAttention, nn.TransformerEncoderLayer and
nn.TransformerDecoderLayer, which positions of each input's token axis the
output at position i can depend on, from the masks the call actually ran
with (report schema: "Token dependencies"). A relation is derived as a
boolean matrix D (output positions x source positions) and then named:

- attention: output i reads value j when key j is visible to query i
  (attn_mask and key_padding_mask allow it). Through the softmax it also
  reads query i and every visible key j, unless only one key is visible:
  a softmax over one score is 1 whatever the score, so that output depends
  on the value alone (the reference's "first_position" case).
- projections, feed-forward blocks, layer norms (over features) and
  residual adds act position by position: they add i to D's row i
  (residual) or leave D as it is.
- arguments that are the same tensor (self-attention) are one source, whose
  D is the union of theirs.

Masks: boolean True blocks; a float mask blocks where it is -inf or its
dtype's most negative value (Hugging Face's convention); is_causal is taken
when the mask agrees with it (MultiheadAttention applies the one or the
other depending on its path). Only the native forwards are analysed here:
a subclass that overrides forward, and modules built from operators, are
left to the token-flow pass over the operators they ran (token_flow.py).

A D is named `none`, `same_position`, `prefix` or `all` (with `limit` and
`first_position` where they apply); a D that is none of them, a mask that
differs between batch elements or heads, a query that sees no key, masks on
meta, or a configuration outside the above (bias_k/bias_v, add_zero_attn,
nested inputs) gives an unavailable object with a reason. Nothing is an upper
bound. The analysis runs after the call with TorchScan's recording paused,
so its own tensor operations are never counted.
"""
from __future__ import annotations

import inspect
import weakref
from typing import Optional, cast

import torch
import torch.nn as nn

from torchscan import _metric

METHOD = "mask_analysis"
ASSUMPTIONS = [
    "structural dependencies under generic finite parameters (a dependency the masks allow is assumed nonzero)",
    "masks are the ones this call ran with and are the same for every batch element and head",
    "dropout inactive (eval mode)",
    "the primary output only; returned attention weights are not described",
]
CODE = "token_dependencies_unavailable"

TYPES = (nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)


class _Unsupported(Exception):
    pass


_FORWARDS = {t.forward for t in TYPES}


def applies(module: nn.Module) -> bool:
    """A native call: one of TYPES whose forward is the native one (a
    subclass that overrides forward may attend differently)."""
    return isinstance(module, TYPES) and type(module).forward in _FORWARDS


# forward function -> inspect.signature of the bound method (self dropped):
# the same for every instance, and costly to derive (decorated forwards, as
# Hugging Face's, unwrap through several layers).
_SIGNATURES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def signature(module: nn.Module) -> inspect.Signature:
    """inspect.signature(module.forward), derived once per forward function."""
    forward = module.forward
    func = getattr(forward, "__func__", None)
    if func is None or getattr(forward, "__self__", None) is not module:  # not a plain bound method
        return inspect.signature(forward)
    sig = _SIGNATURES.get(func)
    if sig is None:
        sig = inspect.signature(forward)
        try:
            _SIGNATURES[func] = sig
        except TypeError:  # a callable without weak references: not cached
            pass
    return sig


def _bound(module: nn.Module, args: tuple, kwargs: dict) -> dict:
    try:
        return dict(signature(module).bind(*args, **kwargs).arguments)
    except TypeError as e:
        raise _Unsupported(f"the call's arguments do not match {type(module).__name__}.forward ({e})") from None


def _seq_axis(t: torch.Tensor, batch_first: bool) -> int:
    if not isinstance(t, torch.Tensor) or t.is_nested:
        raise _Unsupported("a nested or non-tensor input has no rectangular token axis")
    if t.dim() == 2:
        return 0  # unbatched (L, E)
    if t.dim() != 3:
        raise _Unsupported(f"expected a 2-d or 3-d input, got {t.dim()}-d")
    return 1 if batch_first else 0


def _allowed(mask: torch.Tensor, what: str) -> torch.Tensor:
    """True where a mask lets attention through: a boolean mask blocks True;
    a float mask is added to the scores, and blocks where it is -inf or its
    dtype's most negative value (the convention of Hugging Face models: the
    softmax weight is then exactly 0). Other finite values let it through."""
    if mask.device.type == "meta":
        raise _Unsupported(f"{what} is on meta: its values, which decide the relation, are unknown")
    mask = mask.detach().cpu()
    if mask.dtype == torch.bool:
        return ~mask
    if not mask.is_floating_point():
        raise _Unsupported(f"{what} has dtype {mask.dtype}; only boolean and floating masks are understood")
    if torch.isnan(mask).any() or (mask == float("inf")).any():
        raise _Unsupported(f"{what} holds NaN or +inf")
    return (mask != float("-inf")) & (mask != torch.finfo(mask.dtype).min)


def _same_everywhere(allowed: torch.Tensor, what: str) -> torch.Tensor:
    """The (..., L, S) or (..., S) mask reduced to one slice, which every
    batch element and head must share."""
    flat = allowed.reshape(-1, *allowed.shape[-2:]) if allowed.dim() > 2 else allowed.unsqueeze(0)
    if not bool((flat == flat[0]).all()):
        raise _Unsupported(f"{what} differs between batch elements or heads")
    return flat[0]


def _visibility(length: int, source: int, attn_mask, key_padding_mask, is_causal: bool = False) -> torch.Tensor:
    """V[i, j]: key j visible to query i, for every batch element and head.
    is_causal: key j visible to query i when j <= i. MultiheadAttention
    takes it as a hint that attn_mask is that mask, and depending on its path
    applies the one or the other: only a causal attn_mask (or none) is
    unambiguous."""
    v = torch.ones(length, source, dtype=torch.bool)
    if is_causal:
        v = torch.ones(length, source, dtype=torch.bool).tril()
    if attn_mask is not None:
        a = _allowed(attn_mask, "attn_mask")
        if a.shape[-2:] != (length, source):
            raise _Unsupported(f"attn_mask has shape {tuple(attn_mask.shape)}, expected (..., {length}, {source})")
        a = _same_everywhere(a, "attn_mask")
        if is_causal and not bool((a == v).all()):
            raise _Unsupported("is_causal is set with an attn_mask that is not causal; PyTorch applies one or the "
                               "other depending on its path")
        v &= a
    if key_padding_mask is not None:
        k = _allowed(key_padding_mask, "key_padding_mask")
        if k.shape[-1] != source:
            raise _Unsupported(f"key_padding_mask has shape {tuple(key_padding_mask.shape)}, expected (..., {source})")
        rows = k.reshape(-1, source)
        if not bool((rows == rows[0]).all()):
            raise _Unsupported("key_padding_mask differs between batch elements")
        v &= rows[0].unsqueeze(0)
    if not bool(v.any(dim=1).all()):
        raise _Unsupported("a query position sees no key (its output is NaN)")
    return v


def _attention(v: torch.Tensor) -> tuple:
    """(D_query, D_key, D_value) of one attention call with visibility v."""
    several = (v.sum(dim=1) >= 2).unsqueeze(1)  # a softmax over two or more scores
    d_value = v
    d_key = v & several
    d_query = torch.eye(v.shape[0], dtype=torch.bool) & several
    return d_query, d_key, d_value


def relation(d: torch.Tensor) -> Optional[dict]:
    """The compact name of dependency matrix d (outputs x sources), or None."""
    length, source = d.shape
    if not bool(d.any()):
        return {"kind": "none"}
    rows = d.any(dim=1)
    first = int(rows.nonzero()[0])
    if bool(rows[:first].any()) or not bool(rows[first:].all()):
        return None
    out: dict = {}
    tail = d[first:]
    i = torch.arange(first, length).unsqueeze(1)
    j = torch.arange(source).unsqueeze(0)
    if first < min(length, source) and length <= source and bool((tail == (j == i)).all()):
        out = {"kind": "same_position"}
    else:
        limit = int(tail[-1].sum())
        if bool(tail[-1, :limit].all()):
            if bool((tail == (j <= torch.clamp(i, max=limit - 1))).all()) and length > 1:
                out = {"kind": "prefix"}
            elif bool((tail == (j < limit)).all()):
                out = {"kind": "all"}
        if not out:
            return None
        if limit < source:
            out["limit"] = limit
    if first:
        out["first_position"] = first
    return out


def _sources(groups: list, length: int) -> list:
    """groups: [(names, tensor, D)], grouped by tensor identity."""
    merged: list = []
    for names, t, d, axis in groups:
        for entry in merged:
            if entry[1] is t:
                entry[0].extend(names)
                entry[2] = entry[2] | d
                break
        else:
            merged.append([list(names), t, d, axis])
    sources = []
    for names, t, d, axis in merged:
        rel = relation(d)
        if rel is None:
            raise _Unsupported(f"the output's dependency on {'/'.join(names)} is none of the relations the schema "
                               "names (none, same_position, prefix, all), e.g. a sliding window, or key padding "
                               "next to a residual path")
        sources.append({"arguments": names, "sequence_axis": axis, "length": int(t.shape[axis]), "relation": rel})
    return sources


def _mha(module: nn.MultiheadAttention, call: dict) -> tuple:
    if module.bias_k is not None or module.add_zero_attn:
        raise _Unsupported("bias_k/bias_v and add_zero_attn attend to positions that are no input's")
    q, k, v = call["query"], call["key"], call["value"]
    axis = _seq_axis(q, module.batch_first)
    kaxis, vaxis = _seq_axis(k, module.batch_first), _seq_axis(v, module.batch_first)
    length, source = int(q.shape[axis]), int(k.shape[kaxis])
    if int(v.shape[vaxis]) != source:
        raise _Unsupported("key and value lengths differ")
    vis = _visibility(length, source, call.get("attn_mask"), call.get("key_padding_mask"),
                      bool(call.get("is_causal", False)))
    d_q, d_k, d_v = _attention(vis)
    groups = [(["query"], q, d_q, axis), (["key"], k, d_k, kaxis), (["value"], v, d_v, vaxis)]
    return {"sequence_axis": axis, "length": length}, _sources(groups, length)


def _self_block(attn: nn.MultiheadAttention, x: torch.Tensor, mask, padding, is_causal: bool) -> tuple:
    """A residual self-attention block on x: D = union of attention's
    query/key/value dependencies and the residual's own position."""
    if attn.bias_k is not None or attn.add_zero_attn:
        raise _Unsupported("bias_k/bias_v and add_zero_attn attend to positions that are no input's")
    axis = _seq_axis(x, attn.batch_first)
    length = int(x.shape[axis])
    vis = _visibility(length, length, mask, padding, is_causal)
    d_q, d_k, d_v = _attention(vis)
    return axis, length, d_q | d_k | d_v | torch.eye(length, dtype=torch.bool)


def _encoder_layer(module: nn.TransformerEncoderLayer, call: dict) -> tuple:
    src = call["src"]
    axis, length, d = _self_block(module.self_attn, src, call.get("src_mask"), call.get("src_key_padding_mask"),
                                  bool(call.get("is_causal", False)))
    return {"sequence_axis": axis, "length": length}, _sources([(["src"], src, d, axis)], length)


def _decoder_layer(module: nn.TransformerDecoderLayer, call: dict) -> tuple:
    tgt, memory = call["tgt"], call["memory"]
    axis, length, d_tgt = _self_block(module.self_attn, tgt, call.get("tgt_mask"), call.get("tgt_key_padding_mask"),
                                      bool(call.get("tgt_is_causal", False)))
    cross = module.multihead_attn
    if cross.bias_k is not None or cross.add_zero_attn:
        raise _Unsupported("bias_k/bias_v and add_zero_attn attend to positions that are no input's")
    maxis = _seq_axis(memory, cross.batch_first)
    source = int(memory.shape[maxis])
    vis = _visibility(length, source, call.get("memory_mask"), call.get("memory_key_padding_mask"),
                      bool(call.get("memory_is_causal", False)))
    _, d_key, d_value = _attention(vis)
    # The cross block's query is the self block's output at the same
    # position, which the residual carries anyway: tgt's relation is d_tgt.
    groups = [(["tgt"], tgt, d_tgt, axis), (["memory"], memory, d_key | d_value, maxis)]
    return {"sequence_axis": axis, "length": length}, _sources(groups, length)


def analyse(module: nn.Module, args: tuple, kwargs: dict) -> tuple:
    """(token_dependencies object, reason when unavailable or None)."""
    base = {"scope": "module_call", "method": METHOD, "assumptions": list(ASSUMPTIONS)}
    try:
        with torch.no_grad():
            call = _bound(module, args, kwargs)
            if isinstance(module, nn.MultiheadAttention):
                output, sources = _mha(module, call)
            elif isinstance(module, nn.TransformerEncoderLayer):
                output, sources = _encoder_layer(module, call)
            else:
                output, sources = _decoder_layer(cast(nn.TransformerDecoderLayer, module), call)
    except _Unsupported as e:
        reason = str(e)
    except Exception as e:  # noqa: BLE001 - never fails the crawl; said in the report
        reason = f"the analysis failed ({type(e).__name__}: {e})"
    else:
        return {"status": "complete", **base, "output": output, "sources": sources}, None
    return {"status": "unavailable", **base, "reason": reason}, reason


def diagnostic(path: str, reason: str) -> dict:
    return {"code": CODE, "severity": "warning", "metric": "token_dependencies",
            "message": f"{path or '(root)'}: token dependencies unavailable: {reason}", "path": path}


def not_applicable_fields(metrics: dict, scope: str) -> None:
    """Receptive-field metrics of a call whose token relations apply."""
    for name in ("receptive_field", "effective_stride", "effective_padding"):
        metrics[name] = _metric.metric("unavailable", unit="positions", scope=scope, method="not_applicable",
                                       reason="token relations apply (token_dependencies), not spatial fields")
