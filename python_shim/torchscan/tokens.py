"""Token dependencies of native attention and Transformer calls.

For each call of nn.MultiheadAttention, nn.TransformerEncoderLayer and
nn.TransformerDecoderLayer, which positions of each input's token axis the
output at position i can depend on, from the masks the call actually ran
with (report schema: "Token dependencies").

The relation is derived by the engine (analyses/token_flow_native.cc, Note
[Visible keys]), the same code that derives the token-flow pass's attention
steps: this module gathers what the call ran with (the layer's
configuration, its bound tensors, the keys each mask lets through, the
causal flags) and names the result. The engine records no tensor values, so
the masks are read here (read_mask), with recording paused.

Masks: MultiheadAttention's boolean masks block where True; a float mask
blocks where it is -inf or its dtype's most negative value (Hugging Face's
convention). Only the native forwards are analysed here: a subclass that
overrides forward, and modules built from operators, are left to the
token-flow pass over the operators they ran (token_flow.py).
"""
from __future__ import annotations

import ctypes
import inspect
import json
import struct
import threading
import weakref
from typing import Any, Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

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
_LAYER_NAMES: Dict[type, str] = {t: t.__name__ for t in TYPES}  # the common case: the class itself, not a subclass
# The layer's masks and causal flags, by forward argument name.
_MASKS = {
    "MultiheadAttention": ("attn_mask", "key_padding_mask"),
    "TransformerEncoderLayer": ("src_mask", "src_key_padding_mask"),
    "TransformerDecoderLayer": ("tgt_mask", "tgt_key_padding_mask", "memory_mask", "memory_key_padding_mask"),
}
_FLAGS = {
    "MultiheadAttention": ("is_causal",),
    "TransformerEncoderLayer": ("is_causal",),
    "TransformerDecoderLayer": ("tgt_is_causal", "memory_is_causal"),
}
_TENSORS = {
    "MultiheadAttention": ("query", "key", "value"),
    "TransformerEncoderLayer": ("src",),
    "TransformerDecoderLayer": ("tgt", "memory"),
}


class _Unbound(Exception):
    pass


# Note [Native layers as PyTorch builds them]
# The native analysis derives a layer's relation from its masks and flags,
# taking the rest of its forward as PyTorch wrote it. So it answers only for
# a call that runs that forward: one of TYPES, or a subclass, whose forward
# and the methods it calls (_NATIVE_METHODS) are PyTorch's, on the class and
# on the instance (`layer.forward = ...` replaces one), and, for the
# Transformer layers, whose attention submodules are native calls
# themselves and whose other parts keep every position apart: linear
# layers, layer norms over the features alone, dropout and element-wise
# activations (a module or a function), none with a forward of its own. Any
# other call goes to the token-flow pass over the operators it ran
# (token_flow.py), which says what it cannot follow.
_NATIVE_METHODS = {t: {name: t.__dict__[name] for name in names} for t, names in (
    (nn.MultiheadAttention, ("forward", "merge_masks")),
    (nn.TransformerEncoderLayer, ("forward", "_sa_block", "_ff_block")),
    (nn.TransformerDecoderLayer, ("forward", "_sa_block", "_mha_block", "_ff_block")))}
_ATTENTION_PARTS = ("self_attn", "multihead_attn")
_POSITIONWISE = (nn.Linear, nn.LayerNorm, nn.Dropout, nn.Identity, nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid,
                 nn.LeakyReLU, nn.ELU, nn.Mish, nn.Hardswish)
_POSITIONWISE_FUNCTIONS = (F.relu, F.gelu, F.silu, torch.relu, torch.tanh, torch.sigmoid)


def _native_base(cls: type):
    """The one of TYPES whose forward and methods the class runs unchanged, or None."""
    if not issubclass(cls, TYPES):  # most classes: one C-level check
        return None
    base = next(t for t in TYPES if issubclass(cls, t))
    if any(getattr(cls, name, None) is not f for name, f in _NATIVE_METHODS[base].items()):
        return None
    return base


def native_class(cls: type) -> bool:
    """Whether calls of this class may be native calls (applies): the class
    runs PyTorch's forward and the methods it calls."""
    return _native_base(cls) is not None


def applies(module: nn.Module) -> bool:
    """A native call: a layer as PyTorch builds it (Note [Native layers as
    PyTorch builds them])."""
    base = _native_base(type(module))
    if base is None or any(name in module.__dict__ for name in _NATIVE_METHODS[base]):  # replaced on the instance
        return False
    if base is nn.MultiheadAttention:  # its forward calls no submodule
        return True
    for name, part in module._modules.items():
        if part is None:
            continue
        if name in _ATTENTION_PARTS:
            if not (isinstance(part, nn.MultiheadAttention) and applies(part)):
                return False
        elif type(part) not in _POSITIONWISE or "forward" in part.__dict__ or (
                type(part) is nn.LayerNorm and len(part.normalized_shape) != 1):
            return False
    # A module activation is among the parts above; a function is kept as an attribute.
    return "activation" in module._modules or module.__dict__.get("activation") in _POSITIONWISE_FUNCTIONS


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


# (id of a signature, positional count, keyword names) -> (the signature, how
# Signature.bind names each argument of such a call: [(name, index into args
# or keyword)], or None where bind refuses it). A model calls each module the
# same way every time; bind itself costs more than the rest of the naming.
_BINDINGS: Dict[tuple, tuple] = {}


def binding(sig: inspect.Signature, nargs: int, keys: tuple) -> Optional[list]:
    key = (id(sig), nargs, keys)
    cached = _BINDINGS.get(key)
    if cached is not None and cached[0] is sig:  # the same signature (an id can be reused once it is freed)
        return cached[1]
    plan: Optional[list] = None
    try:
        # bind() on stand-ins that say where each value comes from.
        bound = sig.bind(*range(nargs), **{k: k for k in keys})
        params = sig.parameters
        steps: list = []
        for name, where in bound.arguments.items():
            kind = params[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                steps.extend((k, k) for k in where)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                steps.extend((f"{name}[{i}]", w) for i, w in enumerate(where))
            else:
                steps.append((name, where))
        plan = steps
    except (TypeError, ValueError):
        plan = None
    if len(_BINDINGS) > 4096:  # bounded: a model has few call forms
        _BINDINGS.clear()
    _BINDINGS[key] = (sig, plan)
    return plan


# Requests in words (Note [Token-flow requests without JSON] in
# analyses/token_flow.h), for this module's native layers and for
# token_flow's module calls. Relation kinds by number (kRelationKinds).
KINDS = ("none", "same_position", "prefix", "all")


class Texts:
    """A word request's strings, each named in its words by (offset, length)."""

    __slots__ = ("_parts", "_size")

    def __init__(self) -> None:
        self._parts: list = []
        self._size = 0

    def __call__(self, value: str) -> tuple:
        data = value.encode("utf-8", "surrogateescape")
        self._parts.append(data)
        self._size += len(data)
        return self._size - len(data), len(data)

    def blob(self) -> bytes:
        return b"".join(self._parts)


def pack_words(words: list) -> Optional[bytes]:
    """The words as bytes, which ctypes passes as a pointer (a ctypes array
    built from the list costs several times as much); None when one does
    not fit 64 bits (the JSON request says it)."""
    try:
        return struct.pack(f"={len(words)}q", *words)
    except struct.error:
        return None


def mask_words(m: dict, text: Texts) -> Optional[tuple]:
    """A mask summary's words from its problem on, or None for one the words
    do not carry (a summary with a reason: read_mask gives none)."""
    problem = _PROBLEM_CODES.get(m.get("problem", ""))
    if problem is None or "reason" in m:
        return None
    shape = m["shape"]
    words = (problem, *text(m.get("dtype", "")), len(shape), *shape)
    if "rows" not in m:
        return words + (0,)
    runs = m["runs"]
    return words + (1, m["rows"], m["cols"], len(runs), *runs)


def relation_of(kind: int, limit: int, first_position: int) -> dict:
    """A relation's words as the JSON answer names it (RelationJson)."""
    relation: Dict[str, Any] = {"kind": KINDS[kind]}
    if limit >= 0:
        relation["limit"] = limit
    if first_position > 0:
        relation["first_position"] = first_position
    return relation


_READ_WORDS = 4096  # a thread's first buffer: a summary of up to 1,364 runs


class _NativeRead:
    """The library's C entry point torchscan_read_mask (integrations/
    bindings.cc) through ctypes, `fn` None where it cannot be reached (the
    operators read every mask); each thread writes the words into its own
    buffer (ctypes lets other threads run during the call)."""

    fn: Any = None
    loaded = False
    buffers = threading.local()

    @classmethod
    def load(cls) -> None:
        import ctypes

        from torchscan._library import entry_point

        fn = entry_point("torchscan_read_mask")
        if fn is not None:
            fn.argtypes = (ctypes.c_uint64, ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64)
            fn.restype = ctypes.c_int64
        cls.fn = fn
        cls.loaded = True

    @classmethod
    def words(cls, count: int = _READ_WORDS) -> Any:
        """This thread's buffer, with room for at least `count` words (it
        grows to the largest summary the thread has read)."""
        words = getattr(cls.buffers, "words", None)
        if words is None or len(words) < count:
            import ctypes

            words = cls.buffers.words = (ctypes.c_int64 * max(count, _READ_WORDS))()
        return words


# A summary's problems by code (kMaskProblemNames in analyses/token_flow.h; "": none).
MASK_PROBLEMS = ("", "meta", "dtype", "non_finite", "differs")
_PROBLEM_CODES = {name: code for code, name in enumerate(MASK_PROBLEMS)}


def _read_natively(mask: torch.Tensor, shape: list, blocks_true: bool, padding: bool):
    """read_mask's summary from the mask's memory (Note [Reading a mask's
    values] in analyses/token_flow.h), or None where that reading does not
    apply: a tensor subclass, another device or dtype, an empty mask."""
    if not _NativeRead.loaded:
        _NativeRead.load()
    fn = _NativeRead.fn
    if fn is None or type(mask) is not torch.Tensor:
        return None
    flags = (1 if blocks_true else 0) | (2 if padding else 0)
    words = _NativeRead.words()
    n = fn(mask._cdata, flags, words, len(words))
    if n > len(words):  # a summary of many runs (a long causal mask): read again with room for it
        words = _NativeRead.words(n)
        n = fn(mask._cdata, flags, words, len(words))
    if n < 3 or n > len(words):
        return None
    if words[0] != 0:
        return {"problem": MASK_PROBLEMS[words[0]], "shape": shape}
    return {"shape": shape, "rows": words[1], "cols": words[2], "runs": words[3:n]}


def span_elements(mask: torch.Tensor) -> int:
    """How many elements of memory a non-empty view spans, from its first
    element to the last it reaches (PyTorch's strides are never negative)."""
    return sum((n - 1) * s for n, s in zip(mask.shape, mask.stride())) + 1


def storage_holds(mask: torch.Tensor) -> bool:
    """Whether every element the view reaches lies inside its storage. A
    storage resized under its tensors keeps their shapes but not their
    memory, and most operators read such a view without a check."""
    if mask.numel() == 0:
        return True
    try:
        nbytes = mask.untyped_storage().nbytes()
    except Exception:  # noqa: BLE001 - no storage to ask (a wrapper subclass): its operators answer, as before
        return True
    return (mask.storage_offset() + span_elements(mask)) * mask.element_size() <= nbytes


def read_mask(mask: torch.Tensor, *, blocks_true: bool, padding: bool = False) -> dict:
    """What an attention mask lets through, in the engine's TokenMask form
    (analyses/token_flow.h): its shape, and of the slice of its last dims
    (the last one for a key padding mask) that every batch element and head
    shares, by row the runs of keys it lets through, flat as [row, lo, hi,
    ...]; or the problem that makes its values unusable. blocks_true: a
    boolean mask blocks where True (MultiheadAttention) rather than lets
    through (scaled_dot_product_attention). A float mask is added to the
    scores and blocks where it is -inf or its dtype's most negative value
    (the softmax weight is then exactly 0)."""
    shape = list(mask.shape)
    if mask.device.type == "meta":
        return {"problem": "meta", "shape": shape}
    summary = _read_natively(mask, shape, blocks_true, padding)
    if summary is not None:
        return summary
    if not storage_holds(mask):
        raise RuntimeError("torchscan: the mask's storage holds fewer bytes than its view reaches "
                           "(resized after the mask was made); its values cannot be read")
    # Few operators: on the small masks of most models each costs more
    # than its arithmetic.
    m = mask.detach().cpu()
    if m.dtype == torch.bool:
        allowed = ~m if blocks_true else m
    elif not m.is_floating_point():
        return {"problem": "dtype", "dtype": str(m.dtype), "shape": shape}
    else:
        # NaN or +inf make the scores NaN; max propagates NaN. Without them,
        # a key is blocked exactly where it is -inf or the dtype's minimum.
        if m.numel():
            top = float(m.amax())
            if top != top or top == float("inf"):
                return {"problem": "non_finite", "shape": shape}
        allowed = m > torch.finfo(m.dtype).min
    if allowed.dim() == 0:
        return {"shape": shape}
    if padding:
        flat = allowed.reshape(-1, 1, shape[-1])
    else:
        flat = allowed.reshape(-1, *allowed.shape[-2:]) if allowed.dim() > 2 else allowed.reshape(1, 1, -1) \
            if allowed.dim() == 1 else allowed.unsqueeze(0)
    if flat.shape[0] > 1 and not bool((flat == flat[0]).all()):
        return {"problem": "differs", "shape": shape}
    rows = flat[0]
    # Run edges: where a key is let through and the one before it is not
    # (a start), or the reverse (one past an end); diff of booleans is their
    # exclusive or. nonzero() lists them row by row, left to right, so each
    # row's edges alternate start, end: a run is two consecutive entries.
    edges = iter(torch.nn.functional.pad(rows, (1, 1)).diff(dim=1).nonzero().tolist())
    runs: list = []
    for (row, start), (_, end) in zip(edges, edges):
        runs += (row, start, end - 1)
    return {"shape": shape, "rows": int(rows.shape[0]), "cols": int(rows.shape[1]), "runs": runs}


def _tensor(value) -> dict:
    if not isinstance(value, torch.Tensor):
        return {"tensor": False}
    if value.is_nested:
        return {"nested": True}
    return {"identity": value._cdata, "sizes": list(value.shape)}


def request(module: nn.Module, args: tuple, kwargs: dict, reads=None) -> dict:
    """The engine's native-layer request for this call (token_flow.h,
    NativeLayerRequest); _Unbound when the arguments do not bind. reads: the
    crawl's _token_masks.MaskReads (a mask passed to every layer is read
    once), or None."""
    sig = signature(module)
    plan = binding(sig, len(args), tuple(kwargs))
    if plan is None:  # bind refuses the call: its message says why
        try:
            call = sig.bind(*args, **kwargs).arguments
        except TypeError as e:
            raise _Unbound(f"the call's arguments do not match {type(module).__name__}.forward ({e})") from None
    else:  # (the native layers' forwards take no *args or **kwargs: each name is a parameter)
        call = {name: args[where] if type(where) is int else kwargs[where] for name, where in plan}
    layer = _LAYER_NAMES.get(type(module)) or next(t.__name__ for t in TYPES if isinstance(module, t))
    layer_module: Any = module  # one of TYPES: its attention submodules by name
    attention: list = [module] if isinstance(module, nn.MultiheadAttention) else [layer_module.self_attn]
    if layer == "TransformerDecoderLayer":
        attention.append(layer_module.multihead_attn)
    masks = {}
    for name in _MASKS[layer]:
        mask = call.get(name)
        if mask is not None:
            padding = name.endswith("key_padding_mask")
            masks[name] = (read_mask(mask, blocks_true=True, padding=padding) if reads is None
                           else reads.summary(mask, blocks_true=True, padding=padding))
    return {"query": "native", "layer": layer,
            "attention": [{"batch_first": bool(a.batch_first),
                           "extra_positions": a.bias_k is not None or bool(a.add_zero_attn)} for a in attention],
            "arguments": {name: _tensor(call.get(name)) for name in _TENSORS[layer]},
            "masks": masks, "flags": {name: bool(call.get(name, False)) for name in _FLAGS[layer]}}


_NATIVE_ANSWER_WORDS = 64  # up to three sources of up to three arguments need 34


class _NativeWords:
    """The library's C entry point torchscan_token_native_request (integrations/
    bindings.cc) through ctypes, `fn` None where it cannot be reached (the
    JSON request instead); each thread its own answer buffer."""

    fn: Any = None
    loaded = False
    buffers = threading.local()

    @classmethod
    def load(cls) -> None:
        from torchscan._library import entry_point

        cls.fn = entry_point("torchscan_token_native_request")
        cls.loaded = True

    @classmethod
    def out(cls) -> tuple:
        out = getattr(cls.buffers, "out", None)
        if out is None:
            reason, length = ctypes.c_void_p(), ctypes.c_int64()
            out = cls.buffers.out = ((ctypes.c_int64 * _NATIVE_ANSWER_WORDS)(), reason, length,
                                     ctypes.byref(reason), ctypes.byref(length))
        return out


def _ask_in_words(req: dict, memo: Optional[dict] = None) -> Optional[dict]:
    """The answer NativeLayerJson gives for `req`, asked in words, or None
    where they cannot carry it (the caller asks in JSON). memo: answers by
    request, for one crawl (Note [Native answers by request])."""
    if not _NativeWords.loaded:
        _NativeWords.load()
    fn = _NativeWords.fn
    if fn is None:
        return None
    text = Texts()
    words = [*text(req["layer"]), len(req["attention"])]
    for a in req["attention"]:
        words += (1 if a["batch_first"] else 0, 1 if a["extra_positions"] else 0)
    names = list(req["arguments"])
    words.append(len(names))
    identities: list = []  # the arguments' tensors, numbered from 1 in the words
    for name in names:
        t = req["arguments"][name]
        words += text(name)
        if "identity" in t:
            identity = t["identity"]
            if identity not in identities:
                identities.append(identity)
            sizes = t["sizes"]
            words += (2, identities.index(identity) + 1, len(sizes), *sizes)
        else:
            words += (1 if t.get("nested") else 0, 0, 0)
    words.append(len(req["masks"]))
    for name, m in req["masks"].items():
        mask = mask_words(m, text)
        if mask is None:
            return None
        words += text(name)
        words += mask
    words.append(len(req["flags"]))
    for name, value in req["flags"].items():
        words += (*text(name), 1 if value else 0)
    packed = pack_words(words)
    if packed is None:
        return None
    blob = text.blob()
    key = (packed, blob)
    answer = memo.get(key) if memo is not None else None
    if answer is None:
        answer = _native_answer(fn, packed, len(words), blob, names)
        if answer is not None and memo is not None:
            memo[key] = answer
    if answer is None or answer["status"] != "complete":
        return answer
    # A fresh answer each time (the report holds it), with the tensors' identities.
    return {"status": "complete", "output": dict(answer["output"]),
            "sources": [{**s, "arguments": list(s["arguments"]), "identity": identities[s["identity"] - 1],
                         "relation": dict(s["relation"])} for s in answer["sources"]]}


# Note [Native answers by request]
# A native layer's answer depends on nothing but its request's words: the
# layer, its attention options, its arguments' shapes and which of them are
# one tensor, the masks' summaries and the flags (NativeLayerWords reads no
# recorded call). The words number the arguments' tensors from 1 instead of
# naming their identities, so that every layer of a stack called the same
# way asks the same words; a crawl keeps each words' answer and asks the
# engine once. The identities are put back into each answer.


def _native_answer(fn, packed: bytes, count: int, blob: bytes, names: list) -> Optional[dict]:
    """The engine's answer to the words, sources numbered as the words number them."""
    answer, reason, length, reason_ref, length_ref = _NativeWords.out()
    n = fn(packed, count, blob, len(blob), answer, _NATIVE_ANSWER_WORDS, reason_ref, length_ref)
    if n < 4:
        return None
    a = answer[:n]
    if a[0] != 1:
        why = ctypes.string_at(reason.value, length.value) if reason.value else b""
        return {"status": "unavailable", "reason": why.decode("utf-8", "replace")}
    sources, at = [], 4
    for _ in range(a[3]):
        count = a[at + 6]
        sources.append({"arguments": [names[i] for i in a[at + 7:at + 7 + count]], "identity": a[at],
                        "sequence_axis": a[at + 1], "length": a[at + 2],
                        "relation": relation_of(a[at + 3], a[at + 4], a[at + 5])})
        at += 7 + count
    return {"status": "complete", "output": {"sequence_axis": a[1], "length": a[2]}, "sources": sources}


def _json_answer(req: dict) -> dict:
    from torchscan._library import Session

    return json.loads(Session.token_flow(json.dumps(req)))


def request_of(module: nn.Module, args: tuple, kwargs: dict, reads=None):
    """request()'s request for this call of a native layer, or the reason (a
    str) why there is none; answer_of gives the layer's token dependencies
    for it. The call's masks are read here: their values are those of this
    moment. reads as request's."""
    grad = torch.is_grad_enabled()  # a crawl runs without: no guard to enter then
    try:
        if grad:
            torch._C._set_grad_enabled(False)
        try:
            return request(module, args, kwargs, reads)
        finally:
            if grad:
                torch._C._set_grad_enabled(True)
    except _Unbound as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - never fails the crawl; said in the report
        return f"the analysis failed ({type(e).__name__}: {e})"


def answer_of(req, memo: Optional[dict] = None) -> tuple:
    """(token_dependencies object, reason when unavailable or None, the
    sources' tensor identities) for request_of's request or reason; memo as
    _ask_in_words'."""
    base = {"scope": "module_call", "method": METHOD, "assumptions": list(ASSUMPTIONS)}
    if isinstance(req, str):
        reason = req
    else:
        try:
            answer = _ask_in_words(req, memo)
            if answer is None:
                answer = _json_answer(req)
        except Exception as e:  # noqa: BLE001 - never fails the crawl; said in the report
            reason = f"the analysis failed ({type(e).__name__}: {e})"
        else:
            if answer["status"] == "complete":
                sources = [{"arguments": s["arguments"], "sequence_axis": s["sequence_axis"], "length": s["length"],
                            "relation": s["relation"]} for s in answer["sources"]]
                deps = {"status": "complete", **base, "output": answer["output"], "sources": sources}
                return deps, None, [s["identity"] for s in answer["sources"]]
            reason = answer["reason"]
    return {"status": "unavailable", **base, "reason": reason}, reason, []


def diagnostic(path: str, reason: str) -> dict:
    return {"code": CODE, "severity": "warning", "metric": "token_dependencies",
            "message": f"{path or '(root)'}: token dependencies unavailable: {reason}", "path": path}


def not_applicable_fields(metrics: dict, scope: str) -> None:
    """Receptive-field metrics of a call whose token relations apply."""
    for name in ("receptive_field", "effective_stride", "effective_padding"):
        metrics[name] = _metric.metric("unavailable", unit="positions", scope=scope, method="not_applicable",
                                       reason="token relations apply (token_dependencies), not spatial fields")
