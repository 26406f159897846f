"""crawl_module's inputs: the shapes it generates inputs of, and the
caller's own args/kwargs, checked with messages that say what to pass."""

from __future__ import annotations

import operator
from collections.abc import Mapping as _MappingABC
from typing import Optional

import torch


_SHAPE_HELP = ("input_shape is the shape of one input without its batch dimension, as a tuple of positive "
               "ints such as (3, 32, 32), or one such tuple per forward argument: ((3, 32, 32), (10,))")


def _dimension(value) -> Optional[int]:
    """`value` as an int dimension (bool is not one), or None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _input_shapes(input_shape) -> list:
    """The shapes of the inputs to generate, checked: a list of int tuples."""
    where = "torchscan.crawl_module"
    if isinstance(input_shape, str):
        parts = input_shape.replace("x", ",").replace("(", "").replace(")", "").split(",")
        dims = [p.strip() for p in parts if p.strip()]
        hint = (f"; did you mean ({', '.join(dims)}{',' if len(dims) == 1 else ''})?"
                if dims and all(d.isdigit() for d in dims) else "")
        raise TypeError(f"{where}: input_shape must be a tuple of ints, not the string {input_shape!r}{hint}")
    if _dimension(input_shape) is not None:
        raise TypeError(f"{where}: input_shape must be a tuple, not the int {input_shape!r}; "
                        f"for a 1-d input write ({input_shape},)")
    if not isinstance(input_shape, (tuple, list)):
        raise TypeError(f"{where}: {_SHAPE_HELP}; got {type(input_shape).__name__}")
    if len(input_shape) == 0:
        raise ValueError(f"{where}: input_shape is empty; {_SHAPE_HELP}")
    nested = all([isinstance(s, (tuple, list)) for s in input_shape])  # a list: see _crawl_module's dtype
    shapes = list(input_shape) if nested else [input_shape]
    for k, shape in enumerate(shapes):
        what = f"input_shape[{k}]" if nested else "input_shape"
        if len(shape) == 0:
            raise ValueError(f"{where}: {what} is empty; {_SHAPE_HELP}")
        for i, d in enumerate(shape):
            if _dimension(d) is None:
                extra = (" (generated inputs need a fixed size for every dimension: pick one)" if d is None
                         else "")
                raise TypeError(f"{where}: {what}[{i}] is {d!r}{extra}; {_SHAPE_HELP}")
            if operator.index(d) <= 0:
                raise ValueError(f"{where}: {what}[{i}] is {d}; dimensions must be positive. {_SHAPE_HELP}")
    return [tuple(operator.index(d) for d in shape) for shape in shapes]


def _generated_inputs(shapes, dtype, device):
    return tuple(torch.rand((1, *shape), dtype=dtype, device=device) for shape in shapes)


def _caller_inputs(args, kwargs) -> tuple:
    """args/kwargs as given to crawl_module, checked: (tuple, dict)."""
    where = "torchscan.crawl_module"
    if args is None:
        args = ()
    elif isinstance(args, torch.Tensor):
        args = (args,)  # one tensor is the forward's one positional argument
    elif not isinstance(args, (tuple, list)):
        raise TypeError(f"{where}: args must be a tuple or list of the forward's positional arguments, "
                        f"e.g. args=(x,) or args=(x, mask); got {type(args).__name__}")
    if kwargs is None:
        kwargs = {}
    elif not isinstance(kwargs, _MappingABC):
        raise TypeError(f"{where}: kwargs must be a mapping of the forward's keyword arguments, "
                        f"e.g. kwargs={{'mask': mask}}; got {type(kwargs).__name__}")
    bad = [k for k in kwargs if not isinstance(k, str)]
    if bad:
        raise TypeError(f"{where}: kwargs keys must be argument names (str); got {bad[0]!r}")
    return tuple(args), dict(kwargs)
