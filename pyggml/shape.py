"""Shapes between numpy's order (outermost first, what pyggml shows everywhere) and ggml's
(ne, innermost first, always four), and how a tensor is named in error messages."""

from __future__ import annotations

import math
import operator

_PADDING = {1: [1, 1, 1], 2: [1, 1], 3: [1], 4: []}


def ne_of(shape) -> list[int]:
    """ggml's ne (innermost first, padded to 4) from a numpy-order shape."""
    ne = list(shape)
    ne.reverse()
    padding = _PADDING.get(len(ne))
    if padding is None:
        raise ValueError(f"A ggml tensor has 1 to 4 dimensions; shape {tuple(shape)} has "
                         f"{len(ne)}.")
    for n in ne:
        if n.__class__ is not int or n < 0:
            return _checked_ne_of(shape)
    return ne + padding


def _checked_ne_of(shape) -> list[int]:
    try:
        ne = [operator.index(n) for n in reversed(shape)]
    except TypeError:
        raise ValueError(f"Tensor dimensions must be integers, not {tuple(shape)!r}.") from None
    if min(ne) < 0:
        raise ValueError(f"Tensor dimensions must be non-negative, not {tuple(shape)}.")
    return ne + _PADDING[len(ne)]


def ggml_dim(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for {ndim} dimensions.")
    return ndim - 1 - (axis % ndim)


def resolve_shape(shape, size: int) -> tuple[int, ...]:
    """Fill in the one -1 dimension of shape so it holds size elements."""
    shape = tuple(operator.index(n) for n in shape)
    if shape.count(-1) > 1:
        raise ValueError(f"reshape allows at most one -1 dimension, not {shape}.")
    known = math.prod(n for n in shape if n != -1)
    if known <= 0 or size % known:
        raise ValueError(f"Cannot reshape {size} elements to {shape}.")
    return tuple(size // known if n == -1 else n for n in shape)


def describe(tensor) -> str:
    name = f"'{tensor.name}' " if tensor.name else ""
    return f"{name}{tensor.dtype.name} {tensor.shape}"
