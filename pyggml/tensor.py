"""Tensor: a node of a ggml graph, with its shape in numpy order.

The one convention: pyggml shapes, axes and strides are numpy's (outermost first), so a
tensor's shape equals the shape of the numpy array it round-trips with. ggml stores them
reversed (ne[0] is the innermost, fastest-varying dimension); only this package translates.
A ggml tensor with ne = [64, 9, 7, 1] has shape (7, 9, 64) here.

Layout operations (reshape, view, permute, transpose, cont, concat, repeat, pad, cpy, cast)
live here; arithmetic and neural-network operations in ops.py.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ._lib import ffi, lib
from .dtypes import GGMLType
from .errors import GGMLError, failure_text
from .numpy_interop import borrowed, copy_in, host_array, to_numpy
from .ops import TensorOps
from .recurrent_ops import RecurrentOps
from .shape import describe, ggml_dim, ne_of, resolve_shape
from .spatial_ops import SpatialOps

# the types whose CPU concat kernels read every stride (ggml-cpu/ops.cpp); others assert
# contiguous rows at compute time
STRIDED_CONCAT = frozenset({GGMLType.F32, GGMLType.I32, GGMLType.F16, GGMLType.BF16,
                            GGMLType.I16, GGMLType.I8})

if TYPE_CHECKING:
    import numpy as np

    from .context import Context


class Tensor(TensorOps, SpatialOps, RecurrentOps):
    __slots__ = ("_ptr", "_ctx", "ndim", "_array_layout", "_shape", "_borrowed", "__weakref__")

    def __init__(self, ptr: Any, ctx: Context, ndim: int) -> None:
        self._ptr = ptr      # the cffi struct ggml_tensor *
        self._ctx = ctx      # a Tensor keeps its Context (and so its memory) alive
        self.ndim = ndim
        # numpy_interop's (shape, dtype, contiguous), made once
        self._array_layout: tuple[tuple[int, ...], np.dtype, bool] | None = None
        # a ggml tensor's shape never changes: read once
        self._shape: tuple[int, ...] | None = None
        self._borrowed: tuple[Any, np.ndarray] | None = None   # (address, numpy view) of borrow()

    # -- identity -------------------------------------------------------------------------

    @property
    def ptr(self) -> Any:
        self._ctx.ptr  # noqa: B018 (raises once the context is closed)
        return self._ptr

    @property
    def context(self) -> Context:
        return self._ctx

    @property
    def shape(self) -> tuple[int, ...]:
        shape = self._shape
        if shape is None:
            ne = self.ptr.ne
            shape = self._shape = tuple(ne[i] for i in range(self.ndim - 1, -1, -1))
        else:
            self._ctx.ptr  # noqa: B018 (raises once the context is closed)
        return shape

    @property
    def strides(self) -> tuple[int, ...]:
        """Byte strides in numpy order (the innermost is the size of one block)."""
        nb = self.ptr.nb
        return tuple(nb[i] for i in range(self.ndim - 1, -1, -1))

    @property
    def dtype(self) -> GGMLType:
        return GGMLType(self.ptr.type)

    @property
    def nbytes(self) -> int:
        return lib.ggml_nbytes(self.ptr)

    @property
    def size(self) -> int:
        return lib.ggml_nelements(self.ptr)

    @property
    def is_contiguous(self) -> bool:
        return bool(lib.ggml_is_contiguous(self.ptr))

    @property
    def op(self) -> str:
        return ffi.string(lib.ggml_op_desc(self.ptr)).decode()

    def sources(self) -> list[Tensor]:
        """The operands of this node (for inspecting a graph; they are read through this
        node's context, whatever context made them)."""
        raw = self.ptr
        return [Tensor(src, self._ctx, max(1, lib.ggml_n_dims(src)))
                for src in (raw.src[i] for i in range(lib.GGML_MAX_SRC)) if src != ffi.NULL]

    @property
    def name(self) -> str:
        return ffi.string(self.ptr.name).decode(errors="replace")

    @name.setter
    def name(self, value: str) -> None:
        lib.ggml_set_name(self.ptr, value.encode()[: lib.GGML_MAX_NAME - 1])

    def set_input(self) -> Tensor:
        """Mark as a graph input, so a scheduler gives it its own memory to fill."""
        lib.ggml_set_input(self.ptr)
        return self

    def set_output(self) -> Tensor:
        """Mark as a graph output, so a scheduler keeps its memory to read back."""
        lib.ggml_set_output(self.ptr)
        return self

    def accumulate_in_f32(self) -> Tensor:
        """Ask every device to sum this product (mul_mat, mul_mat_id, flash_attn_ext) in
        float32: a GPU's kernels may otherwise accumulate in float16, whose range attention
        scores can exceed (llama.cpp asks it of every attention). The CPU always does."""
        if not lib.ggml_prec_set_acc(self.ptr, lib.GGML_PREC_F32):
            raise GGMLError(f"Only products take an accumulation precision, not {self.op}.")
        return self

    def __repr__(self) -> str:
        if self._ctx.closed:
            return "<Tensor of a closed context>"
        return f"<Tensor {self.name!r} {self.dtype.name} {self.shape} op={self.op}>"

    # -- plumbing shared by every operation -----------------------------------------------

    def _home(self, other: Tensor | None = None, *more: Tensor | None) -> Context:
        """The context a result is built in: this tensor's, unless that holds storage
        (weights, caches), then the first operand's that does not. Raises if an operand's
        context was closed (its ggml tensor is gone)."""
        ctx = self._ctx
        if other is None:
            return ctx
        if more:
            return self._home_of_many((other, *more))
        other_ctx = other._ctx
        if other_ctx._ptr is None:
            other.ptr  # noqa: B018 (raises: closed)
        if ctx.storage:
            ctx.ptr  # noqa: B018 (raises if closed)
            if not other_ctx.storage:
                return other_ctx
        return ctx

    def _home_of_many(self, operands: Iterable[Tensor | None]) -> Context:
        present = [t for t in operands if t is not None]
        for tensor in present:
            tensor.ptr  # noqa: B018 (raises once closed)
        ctx = self._ctx
        if ctx.storage:
            ctx.ptr  # noqa: B018 (raises once closed)
            for tensor in present:
                if not tensor._ctx.storage:
                    return tensor._ctx
        return ctx

    def _result(self, ctx: Context, raw: Any, ndim: int, what: str | tuple[str, object],
                *operands: Tensor | None) -> Tensor:
        """Wrap raw, or raise naming what failed: a string, or (words, value) formatted
        only on failure so that the success path builds no message."""
        if raw:
            return Tensor(raw, ctx, ndim)
        if isinstance(what, tuple):
            what = f"{what[0]} {tuple(what[1]) if isinstance(what[1], list) else what[1]}"
        shapes = ", ".join(describe(t) for t in (self, *operands) if isinstance(t, Tensor))
        raise GGMLError(failure_text(what, shapes + ctx.fullness()))

    # -- layout ---------------------------------------------------------------------------

    def reshape(self, *shape: int | Sequence[int]) -> Tensor:
        """Same data, new numpy-order shape (one dimension may be -1). Needs contiguity."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        if -1 in shape:
            shape = resolve_shape(shape, self.size)
        ne = ne_of(shape)
        ctx = self._home()
        raw = lib.safe_ggml_reshape_4d(ctx.ptr, self._ptr, *ne)
        return self._result(ctx, raw, len(shape), ("reshaping to", shape))

    def view(self, shape: Sequence[int], offset: int = 0,
             strides: Sequence[int] | None = None) -> Tensor:
        """A view of numpy-order shape starting offset bytes in, with byte strides (numpy
        order, the innermost equal to this tensor's); contiguous rows by default."""
        ne = ne_of(shape)
        raw_self = self.ptr
        dtype = raw_self.type
        row = lib.ggml_row_size(dtype, ne[0])
        if strides is None:
            nb1 = row
            nb2 = nb1 * ne[1]
            nb3 = nb2 * ne[2]
        else:
            strides = [operator.index(s) for s in strides]
            if len(strides) != len(shape):
                raise ValueError(f"A view of shape {tuple(shape)} needs {len(shape)} strides, "
                                 f"not {len(strides)}.")
            nb = strides[::-1]
            while len(nb) < 4:
                nb.append(nb[-1] * ne[len(nb) - 1])
            nb1, nb2, nb3 = nb[1], nb[2], nb[3]
        end = offset + row + (ne[1] - 1) * nb1 + (ne[2] - 1) * nb2 + (ne[3] - 1) * nb3
        if offset < 0 or (0 not in ne and end > lib.ggml_nbytes(raw_self)):
            raise ValueError(f"A view of shape {tuple(shape)} at offset {offset} reaches byte "
                             f"{end}, past the end of {describe(self)} "
                             f"({lib.ggml_nbytes(raw_self)} bytes).")
        ctx = self._home()
        raw = lib.safe_ggml_view_4d(ctx.ptr, raw_self, *ne, nb1, nb2, nb3, offset)
        return self._result(ctx, raw, len(shape), ("viewing as", shape))

    def permute(self, *axes: int | Sequence[int]) -> Tensor:
        """Reorder dimensions like numpy.transpose: result.shape[i] == shape[axes[i]]."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        n = self.ndim
        ggml_axes = [0, 1, 2, 3]
        seen = 0
        for i, axis in enumerate(axes):
            if axis.__class__ is not int or not 0 <= axis < n or seen & (1 << axis):
                seen = -1
                break
            seen |= 1 << axis
            ggml_axes[n - 1 - axis] = n - 1 - i
        if seen != (1 << n) - 1:
            raise ValueError(f"permute of a {n}-dimensional tensor needs a permutation of "
                             f"0..{n - 1}, not {axes}.")
        ctx = self._home()
        raw = lib.safe_ggml_permute(ctx.ptr, self._ptr, *ggml_axes)
        return self._result(ctx, raw, n, ("permuting by", axes))

    def transpose(self) -> Tensor:
        """Swap the last two dimensions (a view)."""
        if self.ndim < 2:
            raise ValueError(f"transpose needs at least 2 dimensions; {describe(self)} has 1.")
        axes = list(range(self.ndim))
        axes[-1], axes[-2] = axes[-2], axes[-1]
        return self.permute(*axes)

    @property
    def T(self) -> Tensor:
        return self.transpose()

    def cont(self) -> Tensor:
        """A contiguous copy (after permute/transpose/view)."""
        ctx = self._home(self)
        return self._result(ctx, lib.safe_ggml_cont(ctx.ptr, self._ptr), self.ndim, "cont", self)

    def concat(self, other: Tensor, axis: int = 0) -> Tensor:
        """Join along axis; a transposed view is taken as it is where ggml's kernels read
        strides (the float and integer types), refused otherwise."""
        ndim = max(self.ndim, other.ndim)
        for operand in (self, other):
            if operand.dtype not in STRIDED_CONCAT and \
                    operand.strides[-1] != operand.dtype.type_size:
                raise GGMLError(failure_text(f"concat along axis {axis}", describe(operand) +
                                             ": a transposed view of this type; cont() it "
                                             "first."))
        dim = ggml_dim(axis, ndim)
        ctx = self._home(other)
        raw = lib.safe_ggml_concat(ctx.ptr, self._ptr, other._ptr, dim)
        return self._result(ctx, raw, ndim, ("concat along axis", axis), other)

    def repeat(self, *shape: int | Sequence[int]) -> Tensor:
        """Tile to a numpy-order shape, each dimension a multiple of this tensor's."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        ctx = self._home()
        raw = lib.safe_ggml_repeat_4d(ctx.ptr, self._ptr, *ne_of(shape))
        return self._result(ctx, raw, max(self.ndim, len(shape)), ("repeat to", shape))

    def pad(self, widths: Sequence[Sequence[int]]) -> Tensor:
        """Zero padding, numpy.pad style: widths is one (before, after) pair per dimension."""
        widths = [tuple(w) for w in widths]
        if len(widths) != self.ndim or any(len(w) != 2 or min(w) < 0 for w in widths):
            raise ValueError(f"pad of {describe(self)} needs {self.ndim} non-negative "
                             f"(before, after) pairs, not {widths}.")
        pairs = widths[::-1] + [(0, 0)] * (4 - self.ndim)
        flat = [int(p) for pair in pairs for p in pair]
        ctx = self._home(self)
        raw = lib.safe_ggml_pad_ext(ctx.ptr, self._ptr, *flat)
        return self._result(ctx, raw, self.ndim, ("pad by", widths))

    def cpy(self, dst: Tensor) -> Tensor:
        """Copy (converting type) into dst; returns the graph node that writes dst."""
        ctx = self._home(dst)
        raw = lib.safe_ggml_cpy(ctx.ptr, self._ptr, dst._ptr)
        return self._result(ctx, raw, dst.ndim, "cpy", dst)

    def cast(self, dtype: GGMLType | str | int) -> Tensor:
        dtype = GGMLType.parse(dtype)
        ctx = self._home(self)
        raw = lib.safe_ggml_cast(ctx.ptr, self._ptr, dtype)
        return self._result(ctx, raw, self.ndim, ("cast to", dtype.name))

    # -- data -----------------------------------------------------------------------------

    def set(self, array: np.ndarray) -> Tensor:
        """Copy a numpy array in; its dtype and shape must match exactly."""
        copy_in(self, array)
        return self

    def numpy(self, copy: bool = False, out: np.ndarray | None = None) -> np.ndarray:
        """The data as a numpy array: a zero-copy view of host storage (weights, caches)
        unless copy=True; always a copy of a graph's results (the scheduler reuses and frees
        that memory) and of quantized tensors (dequantized to float32). out: an array of
        the tensor's shape and dtype to copy into and return (no allocation)."""
        return to_numpy(self, copy, out)

    def borrow(self) -> np.ndarray | None:
        """The data as a numpy array without a copy, a graph's results included: valid only
        until the scheduler computes or allocates again, so read it at once. None where the
        tensor is not plain numbers in host memory (a GPU's, a quantized one)."""
        return borrowed(self)

    def host_array(self, shape: Sequence[int] | None = None) -> np.ndarray:
        """A new array of this tensor's dtype (and shape, or the one given) in the host memory
        its device copies to fastest (pinned, for a GPU): numpy(out=...) reads into it."""
        return host_array(self, self.shape if shape is None else shape)
