"""Where a crawl's token analysis finds the attention masks a module call
ran with (its arguments, or the buffers of the module and its children:
the recorder holds identities, not values) and how it reads them: once
per crawl while a mask holds the same values (token_flow.py asks)."""

from __future__ import annotations

import ctypes
import weakref
from typing import Dict, Optional

import torch
import torch.nn as nn

from torchscan import tokens


def _find_buffers(module: nn.Module, missing: set, known: dict) -> None:
    """Adds to `known` the buffers of the module and its descendants whose
    identities are in `missing` (emptied as they are found), as
    module.buffers() would find them. Walked with one stack over the
    modules' dicts: buffers() nests a generator per level and runs for every
    attention call whose mask was made inside it (most outer modules of a
    transformer), where nothing is found. A crawl searches its tree's
    preorder instead where it can (TreeBuffers)."""
    stack = [module]
    seen = set()
    while stack and missing:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        _take_buffers(m._buffers, missing, known)
        stack.extend(c for c in m._modules.values() if c is not None)


def _holds(buffers: dict, missing: set) -> bool:
    return any(b is not None and b._cdata in missing for b in buffers.values())


def _take_buffers(buffers: dict, missing: set, known: dict) -> None:
    """Moves the buffers (a module's own) whose identities are in `missing`
    into `known`."""
    for b in buffers.values():
        if b is not None and b._cdata in missing:
            missing.discard(b._cdata)
            known[b._cdata] = b


class TreeBuffers:
    """Where a crawl looks for the masks a call's arguments do not hold: the
    buffers of the module and its descendants. The crawl's modules are
    fixed when it starts (its hooks are on them): a module's descendants
    are a contiguous span of the preorder the crawl listed then (every
    path, so a shared module appears at each; its first span stands for
    it); the buffers themselves are read live. A module outside the crawl's
    list is walked instead (_find_buffers). Outer modules of a transformer
    miss the masks their layers make inside, each call: a walk per call
    costs the depth of the tree times its size. So every position's buffers
    are scanned first, most of them empty, and the spans (derived once per
    crawl from the paths' depths) are needed only where a missing tensor
    is some module's buffer.

    A child added during the forward is not searched (its mask stays
    unknown: the call's tokens are unavailable, said so); a tensor found is
    the one whose identity the engine recorded, wherever it is held."""

    def __init__(self, named: Optional[list]) -> None:
        self._named = named  # (path, module) in the crawl's preorder, every path, or None
        # Each position's own buffer dict, in preorder: the dicts register_buffer
        # and assignment change, so they are live; most are empty.
        self._buffers: Optional[list] = None
        self._listed: set = set()  # id(module) of each listed module
        self._spans: Optional[Dict[int, tuple]] = None  # id(module) -> (first, one past its last descendant)

    def _span(self, module: nn.Module) -> Optional[tuple]:
        if self._spans is None:
            self._spans = {}
            if self._named:
                self._build(self._named)
        return self._spans.get(id(module))

    def _build(self, named: list) -> None:
        # A path's depth is its count of names (a child's name holds no dot:
        # add_module refuses one); an entry's descendants end at the next
        # entry no deeper than it.
        ends = [len(named)] * len(named)
        open_entries: list = []  # (depth, index) of entries whose descendants may follow
        for i, (path, _) in enumerate(named):
            depth = path.count(".") + 1 if path else 0
            while open_entries and open_entries[-1][0] >= depth:
                ends[open_entries.pop()[1]] = i
            open_entries.append((depth, i))
        # reversed: the first position of a shared module is written last
        self._spans = {id(m): (i, ends[i]) for i, (_, m) in reversed(list(enumerate(named)))}

    def find(self, module: nn.Module, missing: set, known: dict) -> None:
        """As _find_buffers."""
        if self._buffers is None:
            named = self._named or []
            self._buffers = [m._buffers for _, m in named]
            self._listed = {id(m) for _, m in named}
        if id(module) not in self._listed:
            _find_buffers(module, missing, known)
            return
        holding = [k for k, buffers in enumerate(self._buffers) if buffers and _holds(buffers, missing)]
        if not holding:  # the common case: no buffer anywhere is one of them
            return
        span = self._span(module)
        if span is None:
            _find_buffers(module, missing, known)
            return
        for k in holding:
            if span[0] <= k < span[1]:
                _take_buffers(self._buffers[k], missing, known)
                if not missing:
                    return


class MaskReads:
    """The summaries of the masks one crawl read, by tensor. A model passes
    one mask to every layer (Hugging Face's models pass the expanded padding
    mask down to each attention and its enclosing modules): it is read once
    while the same tensor holds the same values. An entry is used only for
    the tensor it was read from, still alive (a weak reference), with the
    same version, storage and shape, and with the values it was read with: a
    write through another alias of its memory (`.data`, a NumPy array from
    `.numpy()` or `torch.from_numpy`, the storage) bumps no version. The
    values are kept as a copy of the memory the view reaches (a CPU mask:
    copied and compared without an operator, so a dispatch mode around the
    crawl sees none, as the library's reading makes none) or as a clone
    compared with torch.equal (other devices, whose reading runs operators
    anyway). A mask whose copy would exceed _COPY_BYTES is read every time,
    as are inference tensors, which have no version."""

    _COPY_BYTES = 64 << 20

    def __init__(self) -> None:
        # identity -> (weak reference, version, data_ptr, shape, values, {(blocks_true, padding): summary})
        self._read: Dict[int, tuple] = {}

    def summary(self, mask: torch.Tensor, blocks_true: bool = False, padding: bool = False) -> dict:
        """read_mask's summary (by default as scaled_dot_product_attention
        reads a mask: boolean True lets through)."""
        identity = mask._cdata
        entry = self._read.get(identity)
        how = (blocks_true, padding)
        try:
            state = (mask._version, mask.data_ptr(), mask.shape)
        except Exception:  # noqa: BLE001 - no version (an inference tensor) or no storage: read every time
            return tokens.read_mask(mask, blocks_true=blocks_true, padding=padding)
        if entry is not None and entry[0]() is mask and entry[1:4] == state and self._same_values(mask, entry[4]):
            summaries = entry[5]
            if how not in summaries:
                summaries[how] = tokens.read_mask(mask, blocks_true=blocks_true, padding=padding)
            return summaries[how]
        summary = tokens.read_mask(mask, blocks_true=blocks_true, padding=padding)
        self._read.pop(identity, None)
        values = self._values(mask)
        if values is not None:
            self._read[identity] = (weakref.ref(mask), *state, values, {how: summary})
        return summary

    @classmethod
    def _values(cls, mask: torch.Tensor):
        """A copy of the mask's values to compare with later, or None (not
        kept). Only plain dense tensors: torch.equal has no kernel for sparse
        or meta tensors, and a subclass may define equality its own way."""
        if type(mask) is not torch.Tensor or mask.layout != torch.strided or mask.device.type == "meta":
            return None
        if mask.device.type != "cpu":
            return mask.clone() if mask.numel() * mask.element_size() <= cls._COPY_BYTES else None
        if not tokens.storage_holds(mask):  # read_mask refused it already; checked again for the copy
            return None
        if mask.numel() == 0:
            return b""
        size = tokens.span_elements(mask) * mask.element_size()  # the bytes the view spans, read from memory
        return ctypes.string_at(mask.data_ptr(), size) if size <= cls._COPY_BYTES else None

    @classmethod
    def _same_values(cls, mask: torch.Tensor, values) -> bool:
        if type(values) is bytes:
            return cls._values(mask) == values
        return torch.equal(values, mask)


def found_masks(module: nn.Module, named: list, identities: list, reads: MaskReads, tree: TreeBuffers) -> list:
    """Summaries of the attention masks the engine found, where this call
    holds them (an argument, or a buffer of the module or its children)."""
    if not identities:
        return []
    known = {t._cdata: t for _, t in named}
    missing = set(identities).difference(known)
    if missing:
        tree.find(module, missing, known)
    held = [(identity, known[identity]) for identity in identities if identity in known]
    if not held:  # made inside the call (most outer calls of a transformer): nothing to read
        return []
    with torch.no_grad():
        return [{"identity": identity, **reads.summary(mask)} for identity, mask in held]
