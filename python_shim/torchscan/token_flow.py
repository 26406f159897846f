"""Token dependencies of module calls built from operators: custom attention
modules around F.scaled_dot_product_attention, Hugging Face attention
layers, and Transformer stacks (nn.TransformerEncoder / Decoder /
Transformer) made of native layers.

For each module call, once the forward has returned, the engine's token-flow pass
(torchscan_dispatch/analyses/token_flow.cc) follows the operators the call ran,
through tensor identities, from its input tensors' token axes to its
output: per-position operators (projections contracting features,
elementwise math with broadcasting, norms and softmax over features, views,
transposes, splits and joins on other dims, eval dropout, token embeddings)
keep output i on the positions input i read; slices and joins along the
token axis (a key/value cache) move them; scaled_dot_product_attention makes output i
read the values of the keys its mask lets through and, through the softmax
over two or more scores, those keys and query i. Module calls inside whose
relation is known (native attention layers, see tokens.py, and modules
analysed before) are taken as one step: their relation is composed with the
dependencies of their inputs. Anything else on the way to the output (an
operator that reorders or mixes positions, attention written as explicit
products, a mask whose values are unknown) makes the result unavailable
with the operator named.

Masks: the engine records no tensor values, so the masks an attention
operator ran with are read here (tokens.read_mask), from the call's own arguments or the
module's buffers (recording paused); a mask made inside the module is
unknown and makes the result unavailable. Each input's token axis is dim -2
of a floating tensor (batch-first (N, L, E), (N, H, L, D) or unbatched
(L, E)), dim 1/0 of a module with `batch_first` False/True as it says, and
the last dim of an integer tensor (token ids). Boolean tensors and
arguments named like masks are masks, not sources.
"""
from __future__ import annotations

import ctypes
import json
import struct
from typing import Any, Dict, Optional, Sequence

import torch
import torch.nn as nn
from torch.utils._pytree import SUPPORTED_NODES, tree_flatten, tree_iter

from torchscan import tokens
from torchscan._token_masks import MaskReads, TreeBuffers, found_masks

METHOD = "token_flow"
ASSUMPTIONS = [
    "structural dependencies under generic finite parameters (a dependency the masks allow is assumed nonzero)",
    "masks are the ones this call ran with and are the same for every batch element and head",
    "dropout inactive (eval mode)",
    "each input's token axis is dim -2 of a floating tensor ((N, L, E), (N, H, L, D), (L, E)) or the last dim of an "
    "integer one, unless the module's batch_first says otherwise; 0-d and 1-d floating tensors are per-position "
    "constants",
    "the primary output (the first output tensor) only",
]
STACKS = (nn.TransformerEncoder, nn.TransformerDecoder, nn.Transformer)
_NOTHING = {"attention": False, "softmax": False, "masks": []}  # read only


def _session():
    from torchscan._library import Session

    return Session


_MASK_CAPACITY = 64  # mask identities one native query returns; more: the JSON query


def _native_query():
    """The library's C entry point torchscan_token_flow_masks (integrations/
    bindings.cc) through ctypes, or None (the JSON query instead). It answers
    whether a closed module scope of this thread's innermost scan ran
    attention or a softmax, and with which masks, for the price of a C call:
    it runs after every module call, and almost every call ran neither.
    Arguments: scope, path (bytes) and its length, the scopes of the known
    calls inside (int32 words, which it does not search: the request takes
    them as steps) and their count, a uint64 buffer for the masks'
    identities and its capacity; the result: bit 0 attention, bit 1
    softmax, the mask count from bit 2, or -1."""
    from torchscan._library import entry_point

    return entry_point("torchscan_token_flow_masks")


_KIND_CODES = {kind: code for code, kind in enumerate(tokens.KINDS)}
_ANSWER_WORDS = 5 + 4 * 64  # an answer with up to 64 sources; more: the JSON request


def _native_words():
    """The library's C entry point torchscan_token_flow_request (integrations/
    bindings.cc) through ctypes, or None (JSON requests instead)."""
    from torchscan._library import entry_point

    return entry_point("torchscan_token_flow_request")


class _WordRequests:
    """Token-flow requests as 64-bit words (Note [Token-flow requests without
    JSON] in torchscan_dispatch/analyses/token_flow.h), answered as the JSON
    request's answer would be, as a dict."""

    def __init__(self, fn):
        self._fn = fn
        self._answer = (ctypes.c_int64 * _ANSWER_WORDS)()
        self._reason = ctypes.c_void_p()
        self._reason_length = ctypes.c_int64()
        self._out = (ctypes.byref(self._reason), ctypes.byref(self._reason_length))  # made once: reused each call

    def ask(self, scope: int, path: str, out: int, sizes: list, sources: list, steps: list,
            masks: Sequence[dict] = ()) -> Optional[dict]:
        """The answer for the output whose identity is `out`, or None when
        the request cannot be put this way (the caller asks in JSON)."""
        text = tokens.Texts()
        words = [scope, *text(path), out, len(sizes), *sizes, len(sources)]
        for k, src in enumerate(sources):
            words += (src["identity"], k, src["sequence_axis"], src["length"])
        words.append(len(masks))
        for m in masks:
            mask = tokens.mask_words(m, text)
            if mask is None:  # not a summary read_mask gives
                return None
            words.append(m["identity"])
            words += mask
        words.append(len(steps))
        for step in steps:
            if "reason" in step:
                words += (step["scope"], step["output"], 1, *text(step["reason"]))
                continue
            marks = step.get("mixed", 0)
            words += (step["scope"], step["output"], *((2, marks) if marks else (0,)), step["output_axis"],
                      step["output_length"], len(step["inputs"]))
            for i in step["inputs"]:
                rel = i["relation"]
                kind = _KIND_CODES.get(rel["kind"])
                if kind is None:
                    return None
                words += (i["identity"], i["axis"], i["length"], kind, rel.get("limit", -1),
                          rel.get("first_position", 0))
        blob = text.blob()
        packed = tokens.pack_words(words)
        if packed is None:  # a word past 64 bits: the JSON request says it
            return None
        n = self._fn(packed, len(words), blob, len(blob), self._answer, _ANSWER_WORDS, *self._out)
        if n < 5:
            return None
        a = self._answer[:n]
        if a[0] != 1:
            reason = ctypes.string_at(self._reason.value, self._reason_length.value) if self._reason.value else b""
            return {"status": "unavailable", "reason": reason.decode("utf-8", "replace"),
                    "explicit_attention": a[1] == 1}
        found = [{"source": a[at], "relation": tokens.relation_of(a[at + 1], a[at + 2], a[at + 3])}
                 for at in range(5, 5 + 4 * a[4], 4)]
        answer = {"status": "complete", "output_axis": a[2], "output_length": a[3], "sources": found}
        if a[1]:  # the output's marked dims; as TokenFlowJson, said only when there are some
            answer["mixed"] = a[1]
        return answer


def _batch_first(module: nn.Module):
    if isinstance(module, STACKS):
        stack: Any = module  # a stack type: it has .layers, or an .encoder with them
        layers = stack.layers if hasattr(stack, "layers") else stack.encoder.layers
        return bool(layers[0].self_attn.batch_first) if len(layers) else None
    # Looked up only where it exists: a missing attribute goes through
    # Module.__getattr__, which builds an AttributeError (microseconds).
    if "batch_first" not in module.__dict__ and not hasattr(type(module), "batch_first"):
        return None
    flag = getattr(module, "batch_first", None)
    return flag if isinstance(flag, bool) else None


_PLAIN = (bool, int, float, str, type(None))  # values that hold no tensor


def _value_tensors(value) -> Sequence[torch.Tensor]:
    """The tensors of one argument value that is no plain tensor (the
    caller's common case, taken without a call), as tree_flatten finds them."""
    Tensor = torch.Tensor
    if isinstance(value, _PLAIN):
        return ()
    if type(value) is tuple and all(type(v) is Tensor for v in value):  # rotary (cos, sin), ...
        return value
    if type(value) not in SUPPORTED_NODES and not isinstance(value, (tuple, Tensor)):
        # A pytree leaf that is no tensor (a key/value cache object): what
        # tree_flatten would find, without its cost. (Tuples are checked
        # there: a named tuple is a node without its own entry.)
        return ()
    flat, _ = tree_flatten(value)
    return [t for t in flat if isinstance(t, Tensor)]


def _argument_tensors(args: tuple, kwargs: dict, take=None) -> dict:
    """{where: items}: for each argument holding tensors (where: its index
    in args, or its keyword), take(tensor) of each of them (the tensor
    itself without take)."""
    found: dict = {}
    Tensor = torch.Tensor
    for where, value in (*enumerate(args), *kwargs.items()):
        if type(value) is Tensor:
            found[where] = (value if take is None else take(value),)
        elif value is not None:
            ts = _value_tensors(value)
            if ts:
                found[where] = tuple(ts) if take is None else tuple(take(t) for t in ts)
    return found


def _named(module: nn.Module, count: int, keywords: tuple, found: dict) -> list:
    """[(argument name, item)] of the items _argument_tensors found in a call
    with `count` positional arguments and these keywords, names from
    forward's signature as Signature.bind gives them (by position, then
    "args[i]" and the keywords where bind refuses the call); an argument
    holding several tensors names them name[k], in tree_flatten's order."""
    plan = None
    try:
        plan = tokens.binding(tokens.signature(module), count, keywords)
    except (TypeError, ValueError):  # no signature
        pass
    if plan is None:
        plan = [(f"args[{i}]", i) for i in range(count)] + [(k, k) for k in keywords]
    out = []
    for name, where in plan:
        items = found.get(where)
        if items is None:
            continue
        if len(items) == 1:
            out.append((name, items[0]))
        else:
            out.extend((f"{name}[{k}]", item) for k, item in enumerate(items))
    return out


def _named_tensors(module: nn.Module, args: tuple, kwargs: dict) -> list:
    """[(argument name, tensor)] of the call (_named's names)."""
    return _named(module, len(args), tuple(kwargs), _argument_tensors(args, kwargs))


def _metadata(t: torch.Tensor) -> tuple:
    """What the sources need of an argument tensor: (identity, dtype, sizes or None for a nested tensor)."""
    return t._cdata, t.dtype, None if t.is_nested else t.shape


def _axis(dtype: torch.dtype, sizes, batch_first):
    """The token axis of an input tensor with this dtype and these sizes
    (None: nested), or None (a mask, a constant)."""
    if sizes is None or dtype == torch.bool:
        return None
    dim = len(sizes)
    if dtype.is_floating_point or dtype.is_complex:
        if dim < 2:
            return None
        if batch_first is not None and dim == 3:
            return 1 if batch_first else 0
        return dim - 2
    return dim - 1 if dim >= 1 else None


def _sources(module: nn.Module, named: list, mask_ids) -> list:
    """The call's sources from [(argument name, _metadata)]: arguments with
    a token axis that are no mask, identical tensors as one source."""
    batch_first = _batch_first(module)
    sources: list = []
    by_identity: Dict[int, int] = {}
    for name, (identity, dtype, sizes) in named:
        axis = _axis(dtype, sizes, batch_first)
        if axis is None or identity in mask_ids or "mask" in name.lower():
            continue
        if identity in by_identity:
            sources[by_identity[identity]]["arguments"].append(name)
            continue
        by_identity[identity] = len(sources)
        sources.append({"arguments": [name], "sequence_axis": axis, "length": int(sizes[axis]), "identity": identity})
    return sources


class _Arguments(tuple):
    """A call's argument tensors as the post-hook took them, named when the
    relations are asked: (module, positional count, keywords,
    _argument_tensors of _metadata)."""


def _relation(rel: dict) -> dict:
    return {k: rel[k] for k in ("kind", "limit", "first_position") if k in rel}


# Note [Token relations asked after the forward]
# The engine's pass reads only what a module call recorded, between its
# scope's first and last calls, so its answer does not depend on when it is
# asked, as long as the scan still runs. What the pass cannot read is taken
# in the post-hook: the call's tensors' identities, dtypes and shapes, and
# its masks' values, which a later call may change (a mask is read as it was
# when its attention ran). The rest waits for the forward to return: the
# arguments' names (forward's signature) and which of them are sources (for
# a call whose masks were read, they are needed to tell the masks apart and
# are found in the post-hook), then the requests themselves, in call order.
# Asked between the module calls, each request evicted the forward's data
# and code from the caches and found its own cold: in one process,
# alternating crawls, asking them afterwards took 4-6% off the crawls of
# BERT, T5, a Llama decode step and nn.TransformerEncoder. Naming the
# arguments afterwards too halved the post-hook's time on BERT (1-2% of a
# 12-layer BERT's crawl).
#
# Which calls become known calls (steps) of an enclosing one is known only
# from their answers. The post-hook takes every call it analyses as one,
# except a call with no output tensor or whose analysis failed there. The
# one kind of call that may turn out not to be one (a softmax with no
# attention, that its answer shows to be no attention written with
# products) ran no attention, so it holds no mask the enclosing call's
# request could need. The enclosing call's attention and softmax flags,
# which the post-hook read without it, are asked again in that case. A
# call whose request fails when asked is no known call either; an enclosing
# call that needs a mask its attention ran with is then unavailable.


class TokenFlow:
    """Per crawl: the token dependencies of every module call that ran
    attention, in call order. after() runs from the module post-hook, after
    the call's scope was popped, and takes what only the call's moment has
    (its tensors' identities and shapes, its masks' values); finish() runs
    once the forward returned, while the scan still runs, and asks the
    engine for every call's relation (Note [Token relations asked after the
    forward]). native: the library's C entry points are in use (the crawl's
    fast path); pause: the crawl's AnalysisPause."""

    def __init__(self, native: bool = False, pause=None, named: Optional[list] = None):
        self.results: dict = {}  # call index -> (token_dependencies, reason or None)
        self._tree = TreeBuffers(named)
        self._native_types: Dict[type, bool] = {}  # per module class: tokens.native_class, asked once a crawl
        # after(): the scopes of the calls taken so far that may be known
        # calls (steps) of an enclosing one, not yet taken by one; in scope order.
        self._taken: list = []
        self._calls: list = []  # what after() took, per call, for finish()
        self._steps: list = []  # finish(): known module calls not yet taken by an enclosing one: (scope, step)
        self._pause = pause
        self._mask_reads = MaskReads()
        self._native_answers: dict = {}  # Note [Native answers by request] in tokens.py
        self._query = _native_query() if native else None
        self._masks = (ctypes.c_uint64 * _MASK_CAPACITY)() if self._query is not None else None
        words = _native_words() if native else None
        self._words = _WordRequests(words) if words is not None else None
        self._Session = _session()

    def _found(self, path: str, scope: int, steps: Sequence[int] = ()) -> dict:
        """What the call's scope ran outside the known calls `steps` (their
        scopes): {"attention", "softmax", "masks"}."""
        if self._query is not None and self._masks is not None:
            encoded = path.encode()
            packed = struct.pack(f"={len(steps)}i", *steps) if steps else None
            flags = self._query(scope, encoded, len(encoded), packed, len(steps), self._masks, _MASK_CAPACITY)
            if flags == 0:  # the common case: neither
                return _NOTHING
            count = flags >> 2
            if flags > 0 and count <= _MASK_CAPACITY:
                return {"attention": bool(flags & 1), "softmax": bool(flags & 2), "masks": self._masks[:count]}
        query = {"query": "masks", "scope": scope, "path": path, "steps": list(steps)}
        return json.loads(self._Session.token_flow(json.dumps(query)))

    def asks(self, module: nn.Module, scope: int, ran: bool) -> bool:
        """Whether after() may have anything to do for this call: not for a
        call that ran neither attention nor a softmax, with no known call
        inside and of a class that is no native attention layer (most
        calls of a network), which the hook then skips. Known calls are
        kept in scope order: only the last can be inside this one."""
        taken = self._taken
        if ran or (bool(taken) and taken[-1] > scope):
            return True
        cls = type(module)
        native = self._native_types.get(cls)
        if native is None and not issubclass(cls, tokens.TYPES):  # no native layer: known without after()
            native = self._native_types[cls] = False
        return native is not False

    def after(self, module: nn.Module, path: str, scope: int, index: int, args: tuple, kwargs: dict,
              output, ran: bool = True) -> None:
        """ran: False when the library said, closing the scope, that the call
        recorded neither attention nor a softmax (the common case, answered
        without a second query)."""
        cls = type(module)
        native = self._native_types.get(cls)
        if native is None:
            native = self._native_types[cls] = tokens.native_class(cls)
        if native:  # and this layer is as PyTorch builds it (a few checks, on native classes only)
            native = tokens.applies(module)
        found = None
        inside: list = []
        if not native:
            # (Calls are taken in scope order: the last is the innermost.)
            inside = [s for s in self._taken if s > scope] if self._taken and self._taken[-1] > scope else []
            if not ran and not inside:
                return
            # Asked before anything else, outside the pause (it runs no tensor
            # work): a call that ran neither attention nor a softmax, with no
            # known call inside, has no token relations to derive.
            try:
                # Not searched inside the known calls: the request takes them as steps.
                found = self._found(path, scope, inside)
            except Exception:  # noqa: BLE001 - asked again inside the analysis, which reports it
                found = None
            if found is not None and not found["attention"] and not found.get("softmax") and not inside:
                return
        if self._pause is None:
            self._take(module, path, scope, index, args, kwargs, output, native, found, inside)
        else:
            with self._pause:
                self._take(module, path, scope, index, args, kwargs, output, native, found, inside)

    def _take(self, module, path, scope, index, args, kwargs, output, native, found, inside) -> None:
        call: Optional[tuple]
        try:
            if native:
                out = self._primary(output)
                call = (_NATIVE, index, scope, tokens.request_of(module, args, kwargs, self._mask_reads),
                        None if out is None else out._cdata)
                step = out is not None
            else:
                call = self._custom_call(module, path, scope, index, args, kwargs, output, found, inside)
                if call is None:
                    return
                step = call[4] is not None
        except Exception as e:  # noqa: BLE001 - never fails the crawl; said in the report
            call, step = (_FAILED, index, scope, f"the analysis failed ({type(e).__name__}: {e})"), False
        self._calls.append(call)
        # The calls inside this one are taken by it from now on.
        self._taken = [s for s in self._taken if s < scope]
        if step:
            self._taken.append(scope)

    def _custom_call(self, module, path, scope, index, args, kwargs, output, found, inside) -> Optional[tuple]:
        """What finish() needs of a call that is no native layer, or None
        when it has no token relations whatever the calls inside turn out."""
        if found is None:
            query = {"query": "masks", "scope": scope, "path": path, "steps": inside}
            found = json.loads(self._Session.token_flow(json.dumps(query)))
        # No attention inside: token relations do not apply, unless a softmax
        # ran over scores of two token-indexed tensors (attention written
        # with explicit products, as Hugging Face's eager attention): that
        # is said to be unavailable in finish().
        explicit_only = not found["attention"] and not inside
        if explicit_only and not found.get("softmax"):
            return None
        out = self._primary(output)
        if explicit_only and (out is None or out.is_nested):
            return None
        masks: list = []
        if found["masks"]:  # read now, as the attention ran with them; the sources with them
            named = _named_tensors(module, args, kwargs)
            masks = found_masks(module, named, found["masks"], self._mask_reads, self._tree)
            sources: Any = _sources(module, [(name, _metadata(t)) for name, t in named],
                                    {m["identity"] for m in masks})
        else:  # named when the relation is asked
            sources = _Arguments((module, len(args), tuple(kwargs), _argument_tensors(args, kwargs, _metadata)))
        # The output: None (no tensor), else its identity and its sizes (None for a nested tensor).
        shown = None if out is None else (out._cdata, None if out.is_nested else list(out.shape))
        flags = (found["attention"], bool(found.get("softmax")))
        return (_CUSTOM, index, scope, path, shown, sources, masks, flags, bool(inside))

    def finish(self) -> None:
        """Asks the engine for the relation of every call after() took, in
        call order; call it once the forward returned, while the scan runs."""
        calls, self._calls = self._calls, []
        if self._pause is None:
            self._answer(calls)
        else:
            with self._pause:
                self._answer(calls)

    def _answer(self, calls: list) -> None:
        for call in calls:
            kind, index, scope = call[0], call[1], call[2]
            try:
                if kind is _NATIVE:
                    deps, reason, identities = tokens.answer_of(call[3], self._native_answers)
                    result = (deps, reason)
                    step = self._native_step(scope, call[4], deps, identities)
                elif kind is _CUSTOM:
                    answer = self._custom(*call[2:])
                    if answer is None:
                        continue
                    result, step = answer
                else:  # _FAILED
                    result, step = _unavailable(call[3]), None
            except Exception as e:  # noqa: BLE001 - never fails the crawl; said in the report
                result, step = _unavailable(f"the analysis failed ({type(e).__name__}: {e})"), None
            self.results[index] = result
            # The calls inside this one are taken by it from now on.
            self._steps = [(s, st) for s, st in self._steps if s < scope]
            if step is not None:
                self._steps.append((scope, step))

    @staticmethod
    def _primary(output):
        # The common forms first (tree_flatten costs more than the rest of
        # a call's analysis): a tensor, or a tuple or list starting with one,
        # whose first leaf is that tensor.
        if type(output) is torch.Tensor:
            return output
        if type(output) in (tuple, list) and output and type(output[0]) is torch.Tensor:
            return output[0]
        # Leaves in tree_flatten's order, up to the first tensor (a model's
        # output holds many); closed here, so that no suspended generator is
        # left to finalize later.
        leaves = tree_iter(output)
        try:
            for t in leaves:
                if isinstance(t, torch.Tensor):
                    return t
        finally:
            leaves.close()
        return None

    @staticmethod
    def _native_step(scope, out: Optional[int], deps, identities) -> Optional[dict]:
        if out is None:
            return None
        if deps["status"] != "complete":
            return {"scope": scope, "output": out, "reason": deps["reason"]}
        inputs = [{"identity": identity, "axis": source["sequence_axis"], "length": source["length"],
                   "relation": _relation(source["relation"])} for source, identity in zip(deps["sources"], identities)]
        return {"scope": scope, "output": out, "output_axis": deps["output"]["sequence_axis"],
                "output_length": deps["output"]["length"], "inputs": inputs}

    def _custom(self, scope, path, shown, sources, masks, flags, had_inside):
        Session = self._Session
        inside = [st for s, st in self._steps if s > scope]
        attention, softmax = flags
        if had_inside and not inside:
            # after() passed over calls inside that turned out to have no
            # relation (a softmax without attention): asked again over them.
            found = self._found(path, scope)
            attention, softmax = found["attention"], bool(found.get("softmax"))
        explicit_only = not attention and not inside
        if explicit_only and (not softmax or shown is None or shown[1] is None):
            return None
        if shown is None:
            reason = "the call returned no tensor"
        elif shown[1] is None:
            reason = "the output is a nested tensor: no rectangular token axis"
        else:
            out, sizes = shown
            if type(sources) is _Arguments:
                module, count, keywords, tensors = sources
                sources = _sources(module, _named(module, count, keywords, tensors), ())
            answer = None
            if self._words is not None:
                answer = self._words.ask(scope, path, out, sizes, sources, inside, masks)
            if answer is None:
                request = {"scope": scope, "path": path, "output": out, "output_sizes": sizes,
                           "inputs": [{"identity": s["identity"], "source": k, "axis": s["sequence_axis"],
                                       "length": s["length"]} for k, s in enumerate(sources)],
                           "masks": masks, "steps": inside}
                answer = json.loads(Session.token_flow(json.dumps(request)))
            if explicit_only and not answer.get("explicit_attention"):
                return None
            if answer["status"] == "complete":
                relations = {s["source"]: s["relation"] for s in answer["sources"]}
                listed = [{"arguments": s["arguments"], "sequence_axis": s["sequence_axis"], "length": s["length"],
                           "relation": relations[k]} for k, s in enumerate(sources)]
                deps = {"status": "complete", "scope": "module_call", "method": METHOD,
                        "assumptions": list(ASSUMPTIONS),
                        "output": {"sequence_axis": answer["output_axis"], "length": answer["output_length"]},
                        "sources": listed}
                step = {"scope": scope, "output": out, "output_axis": answer["output_axis"],
                        "output_length": answer["output_length"],
                        "inputs": [{"identity": s["identity"], "axis": s["sequence_axis"], "length": s["length"],
                                    "relation": relations[k]} for k, s in enumerate(sources)]}
                if answer.get("mixed"):  # parts of it read different inputs: an enclosing call must know
                    step["mixed"] = answer["mixed"]
                return (deps, None), step
            reason = answer["reason"]
        step = {"scope": scope, "output": shown[0], "reason": reason} if shown is not None else None
        return _unavailable(reason), step


# What TokenFlow.after() took of a call, a tuple by kind (its first item):
# (_NATIVE, index, scope, request_of's request or reason, output identity or None);
# (_CUSTOM, index, scope, path, output (identity, sizes or None) or None,
#  sources, mask summaries, (attention, softmax) flags, whether calls were taken inside);
# (_FAILED, index, scope, reason).
_NATIVE, _CUSTOM, _FAILED = "native", "custom", "failed"


def _unavailable(reason: str) -> tuple:
    """A call's result (token_dependencies, reason) when its tokens are unavailable."""
    return {"status": "unavailable", "scope": "module_call", "method": METHOD, "assumptions": list(ASSUMPTIONS),
            "reason": reason}, reason
