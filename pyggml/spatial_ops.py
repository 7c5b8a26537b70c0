"""Convolution, pooling and resampling of Tensor (mixed into pyggml.tensor.Tensor, as ops.py
is): what image and audio encoders build with.

Shapes in the comments are numpy order (see tensor.py); strides, paddings and dilations are
(height, width) pairs, as the shapes are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._lib import lib
from .dtypes import GGMLType
from .ops import named_constant
from .shape import ne_of

if TYPE_CHECKING:
    from .context import Context
    from .tensor import Tensor

POOL_OPS = {"max": lib.GGML_OP_POOL_MAX, "avg": lib.GGML_OP_POOL_AVG}
SCALE_MODES = {
    "nearest": lib.GGML_SCALE_MODE_NEAREST,
    "bilinear": lib.GGML_SCALE_MODE_BILINEAR,
    "bicubic": lib.GGML_SCALE_MODE_BICUBIC,
}


class SpatialOps:
    __slots__ = ()

    if TYPE_CHECKING:
        # what these operations use of Tensor, the one class they are mixed into
        _ptr: Any
        ndim: int

        @property
        def shape(self) -> tuple[int, ...]: ...
        def _home(self, other: Tensor | None = None, *more: Tensor | None) -> Context: ...
        def _result(self, ctx: Context, raw: Any, ndim: int, what: str | tuple[str, object],
                    *operands: Tensor | None) -> Tensor: ...

    def im2col(self, data: Tensor, stride: Sequence[int] = (1, 1),
               padding: Sequence[int] = (0, 0), dilation: Sequence[int] = (1, 1),
               is_2d: bool = True, dtype: GGMLType | str | int = "F16") -> Tensor:
        """Unfold data (N, C, H, W) for self's kernel (OC, C, KH, KW) into
        (N, OH, OW, C*KH*KW); with is_2d False, data (N, C, W) -> (N, OW, C*KW)."""
        (s1, s0), (p1, p0), (d1, d0) = stride, padding, dilation
        ctx = self._home(data)
        raw = lib.safe_ggml_im2col(ctx.ptr, self._ptr, data._ptr, s0, s1, p0, p1, d0, d1,
                                   is_2d, GGMLType.parse(dtype))
        return self._result(ctx, raw, 4 if is_2d else 3, "im2col", data)

    def conv_2d(self, data: Tensor, stride: Sequence[int] = (1, 1),
                padding: Sequence[int] = (0, 0), dilation: Sequence[int] = (1, 1)) -> Tensor:
        """self kernel (OC, C, KH, KW) over data (N, C, H, W) -> (N, OC, OH, OW)."""
        (s1, s0), (p1, p0), (d1, d0) = stride, padding, dilation
        ctx = self._home(data)
        raw = lib.safe_ggml_conv_2d(ctx.ptr, self._ptr, data._ptr, s0, s1, p0, p1, d0, d1)
        return self._result(ctx, raw, 4, "conv_2d", data)

    def conv_1d_dw(self, data: Tensor, stride: int = 1, padding: int = 0,
                   dilation: int = 1) -> Tensor:
        """Depthwise: self kernel (C, 1, K) over data (C, L) -> (C, OL), channel by channel."""
        ctx = self._home(data)
        raw = lib.safe_ggml_conv_1d_dw(ctx.ptr, self._ptr, data._ptr, stride, padding,
                                       dilation)
        return self._result(ctx, raw, data.ndim, "conv_1d_dw", data)

    def pool_2d(self, op: str, kernel: Sequence[int], stride: Sequence[int] | None = None,
                padding: Sequence[int] = (0, 0)) -> Tensor:
        """'max' or 'avg' pooling of self (N, C, H, W) with kernel (KH, KW)."""
        (k1, k0), (p1, p0) = kernel, padding
        s1, s0 = stride or kernel
        ctx = self._home()
        raw = lib.safe_ggml_pool_2d(ctx.ptr, self._ptr, named_constant(POOL_OPS, op, "pool op"),
                                    k0, k1, s0, s1, p0, p1)
        return self._result(ctx, raw, max(self.ndim, 2), ("pool_2d", op))

    def interpolate(self, shape: Sequence[int], mode: str = "nearest",
                    align_corners: bool = False) -> Tensor:
        """Resample to a numpy-order shape of the same rank."""
        flags = named_constant(SCALE_MODES, mode, "interpolation mode")
        if align_corners:
            flags |= lib.GGML_SCALE_FLAG_ALIGN_CORNERS
        ctx = self._home()
        raw = lib.safe_ggml_interpolate(ctx.ptr, self._ptr, *ne_of(shape), flags)
        return self._result(ctx, raw, len(tuple(shape)), ("interpolate to", shape))

    def upscale(self, factor: int, mode: str = "nearest") -> Tensor:
        """Scale the last two dimensions by an integer factor."""
        shape = list(self.shape)
        shape[-1] *= factor
        if len(shape) > 1:
            shape[-2] *= factor
        return self.interpolate(shape, mode)
