"""Arithmetic and neural-network operations of Tensor (mixed into pyggml.tensor.Tensor).

Shapes in the comments are numpy order (see tensor.py). Every call builds a graph node; it
computes nothing until a Scheduler runs the graph. A call ggml rejects (bad shapes or types)
raises GGMLError with ggml's message and the operands' shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._lib import ffi, lib
from .dtypes import GGMLType
from .errors import GGMLError, failure_text

if TYPE_CHECKING:
    from .context import Context
    from .tensor import Tensor

ROPE_MODES = {
    "normal": lib.GGML_ROPE_TYPE_NORMAL,
    "neox": lib.GGML_ROPE_TYPE_NEOX,
    "mrope": lib.GGML_ROPE_TYPE_MROPE,
    "imrope": lib.GGML_ROPE_TYPE_IMROPE,
    "vision": lib.GGML_ROPE_TYPE_VISION,
}


def named_constant(table: dict, key: str, what: str) -> int:
    """table[key], or a ValueError naming what key was meant to be and the choices."""
    try:
        return table[key]
    except KeyError:
        raise ValueError(f"Unknown {what} {key!r}; choose one of {', '.join(table)}.") from None


def _null(tensor: Tensor | None) -> Any:
    return ffi.NULL if tensor is None else tensor.ptr


def _add_sinks(add: Callable[[Any, Any], int], attention: Tensor, sinks: Tensor) -> None:
    """Give a soft_max or flash_attn_ext node its per-head sinks (F32, one per head)."""
    if sinks.dtype != GGMLType.F32 or sinks.ndim != 1:
        raise ValueError(f"Attention sinks are one F32 value per head, not {sinks.dtype.name} "
                         f"of shape {sinks.shape}.")
    if not add(attention._ptr, sinks._ptr):
        raise GGMLError(failure_text("adding attention sinks", f"sinks {sinks.shape}"))


def _bound_indices(ids: Tensor, limit: int, what: str) -> None:
    """Remember that ids indexes something of `limit` entries (checked when ids is set)."""
    limits = ids._ctx.index_limits          # keyed by the ggml tensor pointer
    previous = limits.get(ids._ptr)
    if previous is None or limit < previous[0]:
        limits[ids._ptr] = (limit, what)


class TensorOps:
    __slots__ = ()

    if TYPE_CHECKING:
        # what these operations use of Tensor, the one class they are mixed into
        _ptr: Any
        ndim: int

        @property
        def shape(self) -> tuple[int, ...]: ...
        @property
        def is_contiguous(self) -> bool: ...
        def _home(self, other: Tensor | None = None, *more: Tensor | None) -> Context: ...
        def _result(self, ctx: Context, raw: Any, ndim: int, what: str | tuple[str, object],
                    *operands: Tensor | None) -> Tensor: ...
        def reshape(self, *shape: int | Sequence[int]) -> Tensor: ...
        def cont(self) -> Tensor: ...

    # -- element-wise ---------------------------------------------------------------------

    def __add__(self, other: Tensor) -> Tensor:
        return self.add(other)

    def __sub__(self, other: Tensor) -> Tensor:
        return self.sub(other)

    def __mul__(self, other: Tensor | float) -> Tensor:
        if isinstance(other, (int, float)):
            return self.scale(other)
        return self.mul(other)

    def __truediv__(self, other: Tensor | float) -> Tensor:
        if isinstance(other, (int, float)):
            return self.scale(1.0 / other)
        return self.div(other)

    def scale(self, s: float, bias: float = 0.0) -> Tensor:
        """self * s + bias."""
        ctx = self._home()
        raw = lib.safe_ggml_scale_bias(ctx.ptr, self._ptr, s, bias) if bias else \
            lib.safe_ggml_scale(ctx.ptr, self._ptr, s)
        return self._result(ctx, raw, self.ndim, "scale")

    def clamp(self, min: float, max: float) -> Tensor:
        ctx = self._home()
        raw = lib.safe_ggml_clamp(ctx.ptr, self._ptr, min, max)
        return self._result(ctx, raw, self.ndim, "clamp")

    # -- products and lookups -------------------------------------------------------------

    def mul_mat(self, b: Tensor) -> Tensor:
        """self (..., M, K) weights, b (..., N, K) -> (..., N, M): b @ self.T, batched and
        broadcast over the leading dimensions (self's must divide b's)."""
        ctx = self._home(b)
        raw = lib.safe_ggml_mul_mat(ctx.ptr, self._ptr, b._ptr)
        return self._result(ctx, raw, max(self.ndim, b.ndim, 2), "mul_mat", b)

    def hadamard(self, rotation: Tensor) -> Tensor:
        """self (..., D) with each run of n values multiplied by rotation (n, n), the
        Walsh-Hadamard matrix walsh_hadamard(n) (n a power of two dividing D) -> float32,
        self's shape. ggml's CPU computes the product so marked as a fast transform (it
        reads only n from rotation), other devices as the product. Orthonormal and its own
        inverse: applied twice it gives self back."""
        n = rotation.shape[-1]
        if rotation.shape != (n, n) or n & (n - 1) or self.shape[-1] % n:
            raise ValueError(f"A Walsh-Hadamard rotation is square with a power-of-two side "
                             f"that divides the rotated rows: {rotation.shape} cannot rotate "
                             f"rows of {self.shape[-1]}.")
        flat = (self if self.is_contiguous else self.cont()).reshape(-1, n)     # (rows, n)
        product = rotation.mul_mat(flat)                                         # (rows, n)
        lib.ggml_mul_mat_set_hint(product._ptr, lib.GGML_HINT_SRC0_IS_HADAMARD)
        return product.reshape(self.shape)

    def mul_mat_id(self, b: Tensor, ids: Tensor) -> Tensor:
        """self (E, M, K) expert weights, b (T, U or 1, K), ids int32 (T, U) choosing experts
        -> (T, U, M): for each token t and slot u, b[t, u] @ self[ids[t, u]].T."""
        ctx = self._home(b, ids)
        raw = lib.safe_ggml_mul_mat_id(ctx.ptr, self._ptr, b._ptr, ids._ptr)
        result = self._result(ctx, raw, 3, "mul_mat_id", b, ids)
        _bound_indices(ids, self._ptr.ne[2], "mul_mat_id expert ids")
        return result

    def get_rows(self, ids: Tensor) -> Tensor:
        """self (..., R, C), ids int32 (..., n) -> float32 (..., n, C); dequantizes."""
        ctx = self._home(ids)
        raw = lib.safe_ggml_get_rows(ctx.ptr, self._ptr, ids._ptr)
        result = self._result(ctx, raw, max(self.ndim, ids.ndim + 1), "get_rows", ids)
        _bound_indices(ids, self._ptr.ne[1], "get_rows row ids")
        return result

    def set_rows(self, src: Tensor, ids: Tensor) -> Tensor:
        """Write src's rows (n, C) into self (R, C) at rows ids (int64 or int32, (n,));
        returns self as the node that does the write (converting to self's type)."""
        ctx = self._home(src, ids)
        raw = lib.safe_ggml_set_rows(ctx.ptr, self._ptr, src._ptr, ids._ptr)
        result = self._result(ctx, raw, self.ndim, "set_rows", src, ids)
        _bound_indices(ids, self._ptr.ne[1], "set_rows row ids")
        return result

    # -- normalisation and attention ------------------------------------------------------

    def rms_norm(self, eps: float) -> Tensor:
        """x / sqrt(mean(x^2) + eps) over the last dimension."""
        ctx = self._home()
        raw = lib.safe_ggml_rms_norm(ctx.ptr, self._ptr, eps)
        return self._result(ctx, raw, self.ndim, "rms_norm")

    def norm(self, eps: float) -> Tensor:
        """(x - mean) / sqrt(var + eps) over the last dimension."""
        ctx = self._home()
        return self._result(ctx, lib.safe_ggml_norm(ctx.ptr, self._ptr, eps), self.ndim, "norm")

    def soft_max(self, mask: Tensor | None = None, scale: float = 1.0, max_bias: float = 0.0,
                 sinks: Tensor | None = None) -> Tensor:
        """softmax(self * scale + mask) over the last dimension; mask (n_q, n_kv) F16 or F32
        broadcasts over heads; max_bias > 0 adds ALiBi slopes. sinks F32 (H,): per head
        (self's first dimension) a logit that joins each row's normalisation and is then
        dropped (gpt-oss's attention sinks)."""
        ctx = self._home(*[t for t in (mask, sinks) if t is not None])
        raw = lib.safe_ggml_soft_max_ext(ctx.ptr, self._ptr, _null(mask), scale, max_bias)
        result = self._result(ctx, raw, self.ndim, "soft_max_ext", mask)
        if sinks is not None:
            _add_sinks(lib.safe_ggml_soft_max_add_sinks, result, sinks)
        return result

    soft_max_ext = soft_max

    def rope_ext(self, positions: Tensor, n_dims: int, mode: str = "normal",
                 freq_factors: Tensor | None = None, freq_base: float = 10000.0,
                 freq_scale: float = 1.0, n_ctx_orig: int = 0, ext_factor: float = 0.0,
                 attn_factor: float = 1.0, beta_fast: float = 32.0,
                 beta_slow: float = 1.0) -> Tensor:
        """Rotary embedding of self (T, H, D) at int32 positions (T,), rotating the first
        n_dims of D; freq_factors (n_dims/2,) divide the frequencies; YaRN via ext_factor."""
        ctx = self._home(positions)
        raw = lib.safe_ggml_rope_ext(
            ctx.ptr, self._ptr, positions._ptr, _null(freq_factors), n_dims,
            named_constant(ROPE_MODES, mode, "rope mode"), n_ctx_orig, freq_base, freq_scale,
            ext_factor, attn_factor, beta_fast, beta_slow)
        return self._result(ctx, raw, self.ndim, "rope_ext", positions)

    def rope_multi(self, positions: Tensor, n_dims: int, sections: Sequence[int],
                   mode: str = "mrope", freq_factors: Tensor | None = None,
                   freq_base: float = 10000.0, freq_scale: float = 1.0, n_ctx_orig: int = 0,
                   ext_factor: float = 0.0, attn_factor: float = 1.0, beta_fast: float = 32.0,
                   beta_slow: float = 1.0) -> Tensor:
        """Multi-axis rope (M-RoPE, vision): positions int32 (4 * T,), one block of T per
        section; sections gives the rotated pairs per axis (4 values)."""
        sections = ffi.new("int[4]", list(sections))
        ctx = self._home(positions)
        raw = lib.safe_ggml_rope_multi(
            ctx.ptr, self._ptr, positions._ptr, _null(freq_factors), n_dims, sections,
            named_constant(ROPE_MODES, mode, "rope mode"), n_ctx_orig, freq_base, freq_scale,
            ext_factor, attn_factor, beta_fast, beta_slow)
        return self._result(ctx, raw, self.ndim, "rope_multi", positions)

    def flash_attn_ext(self, k: Tensor, v: Tensor, mask: Tensor | None = None,
                       scale: float = 1.0, max_bias: float = 0.0, logit_softcap: float = 0.0,
                       sinks: Tensor | None = None) -> Tensor:
        """Fused attention. self q (B, H, n_q, D), k (B, H_kv, n_kv, D), v (B, H_kv, n_kv, Dv),
        mask F16 (n_q padded, n_kv) -> (B, n_q, H, Dv). H must be a multiple of H_kv.
        sinks F32 (H,): as soft_max's."""
        ctx = self._home(k, v, *[t for t in (sinks,) if t is not None])
        raw = lib.safe_ggml_flash_attn_ext(ctx.ptr, self._ptr, k._ptr, v._ptr, _null(mask),
                                           scale, max_bias, logit_softcap)
        result = self._result(ctx, raw, max(self.ndim, 3), "flash_attn_ext", k, v)
        if sinks is not None:
            _add_sinks(lib.safe_ggml_flash_attn_ext_add_sinks, result, sinks)
        return result

    # -- sorting --------------------------------------------------------------------------

    def argsort(self, descending: bool = False) -> Tensor:
        """int32 indices that sort each row (last dimension)."""
        order = lib.GGML_SORT_ORDER_DESC if descending else lib.GGML_SORT_ORDER_ASC
        ctx = self._home()
        return self._result(ctx, lib.safe_ggml_argsort(ctx.ptr, self._ptr, order), self.ndim,
                            "argsort")

    def top_k(self, k: int) -> Tensor:
        """int32 indices of the k largest values of each row, in no particular order."""
        ctx = self._home()
        return self._result(ctx, lib.safe_ggml_top_k(ctx.ptr, self._ptr, k), self.ndim,
                            f"top_k({k})")

    def argmax(self) -> Tensor:
        """int32 index of the largest value of each row of a matrix (R, N) -> (R,); the first
        of equal largest values (patch 0007)."""
        if self.ndim > 2:
            raise ValueError(f"argmax takes a vector or a matrix, not {self.ndim} dimensions.")
        ctx = self._home()
        return self._result(ctx, lib.safe_ggml_argmax(ctx.ptr, self._ptr), 1, "argmax")

    # element-wise and row-wise operations, one ggml call each

    def _unary(self, fn: Callable[[Any, Any], Any], name: str) -> Tensor:
        ctx = self._home()
        return self._result(ctx, fn(ctx.ptr, self._ptr), self.ndim, name)

    def _binary(self, fn: Callable[[Any, Any, Any], Any], name: str, other: Tensor) -> Tensor:
        ctx = self._home(other)
        return self._result(ctx, fn(ctx.ptr, self._ptr, other._ptr), max(self.ndim, other.ndim),
                            name, other)

    def gelu(self) -> Tensor:
        """GELU, tanh approximation."""
        return self._unary(lib.safe_ggml_gelu, "gelu")

    def gelu_erf(self) -> Tensor:
        """GELU, exact (erf)."""
        return self._unary(lib.safe_ggml_gelu_erf, "gelu_erf")

    def gelu_quick(self) -> Tensor:
        """x * sigmoid(1.702 x)."""
        return self._unary(lib.safe_ggml_gelu_quick, "gelu_quick")

    def silu(self) -> Tensor:
        """x * sigmoid(x)."""
        return self._unary(lib.safe_ggml_silu, "silu")

    def relu(self) -> Tensor:
        """max(x, 0)."""
        return self._unary(lib.safe_ggml_relu, "relu")

    def sigmoid(self) -> Tensor:
        """1 / (1 + exp(-x))."""
        return self._unary(lib.safe_ggml_sigmoid, "sigmoid")

    def tanh(self) -> Tensor:
        """tanh(x)."""
        return self._unary(lib.safe_ggml_tanh, "tanh")

    def softplus(self) -> Tensor:
        """log(1 + exp(x))."""
        return self._unary(lib.safe_ggml_softplus, "softplus")

    def exp(self) -> Tensor:
        """exp(x)."""
        return self._unary(lib.safe_ggml_exp, "exp")

    def sqr(self) -> Tensor:
        """x * x."""
        return self._unary(lib.safe_ggml_sqr, "sqr")

    def sqrt(self) -> Tensor:
        """sqrt(x)."""
        return self._unary(lib.safe_ggml_sqrt, "sqrt")

    def log(self) -> Tensor:
        """Natural logarithm."""
        return self._unary(lib.safe_ggml_log, "log")

    def floor(self) -> Tensor:
        """The largest integer not above x."""
        return self._unary(lib.safe_ggml_floor, "floor")

    def sum_rows(self) -> Tensor:
        """Sum over the last dimension, kept as size 1."""
        return self._unary(lib.safe_ggml_sum_rows, "sum_rows")

    def mean(self) -> Tensor:
        """Mean over the last dimension, kept as size 1."""
        return self._unary(lib.safe_ggml_mean, "mean")

    def geglu_halves(self) -> Tensor:
        """gelu(first half of each row) * its second half, halving the last dimension (a
        fused gate_up's output)."""
        return self._unary(lib.safe_ggml_geglu, "geglu_halves")

    quick_gelu = gelu_quick

    def swiglu_oai(self, up: Tensor, alpha: float, limit: float) -> Tensor:
        """gpt-oss's clamped SwiGLU: with g = min(self, limit) and u = clamp(up, -limit,
        limit), g * sigmoid(alpha * g) * (u + 1)."""
        ctx = self._home(up)
        raw = lib.safe_ggml_swiglu_oai(ctx.ptr, self._ptr, up._ptr, alpha, limit)
        return self._result(ctx, raw, max(self.ndim, up.ndim), "swiglu_oai", up)

    def add_id(self, rows: Tensor, ids: Tensor) -> Tensor:
        """self (T, K, C) plus, for each (t, k), row ids[t, k] of rows (R, C) (each chosen
        expert's bias): (T, K, C)."""
        ctx = self._home(rows, ids)
        raw = lib.safe_ggml_add_id(ctx.ptr, self._ptr, rows._ptr, ids._ptr)
        result = self._result(ctx, raw, self.ndim, "add_id", rows, ids)
        _bound_indices(ids, rows._ptr.ne[1], "add_id row ids")
        return result

    def swiglu(self, other: Tensor) -> Tensor:
        """silu(self) * up, fused (a SwiGLU FFN's gate)."""
        return self._binary(lib.safe_ggml_swiglu_split, "swiglu", other)

    def geglu(self, other: Tensor) -> Tensor:
        """gelu(self) * up, fused (a GeGLU FFN's gate)."""
        return self._binary(lib.safe_ggml_geglu_split, "geglu", other)

    def add(self, other: Tensor) -> Tensor:
        """self + other; other broadcasts (each of self's dimensions a multiple of
        other's)."""
        return self._binary(lib.safe_ggml_add, "add", other)

    def sub(self, other: Tensor) -> Tensor:
        """self - other, broadcasting other."""
        return self._binary(lib.safe_ggml_sub, "sub", other)

    def mul(self, other: Tensor) -> Tensor:
        """self * other element-wise, broadcasting other."""
        return self._binary(lib.safe_ggml_mul, "mul", other)

    def div(self, other: Tensor) -> Tensor:
        """self / other element-wise, broadcasting other."""
        return self._binary(lib.safe_ggml_div, "div", other)


def walsh_hadamard(n: int) -> np.ndarray:
    """The orthonormal n x n Walsh-Hadamard matrix (Sylvester's order, entries
    +-1/sqrt(n) rounded as llama.cpp rounds them), float32: Tensor.hadamard's rotation."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"A Walsh-Hadamard matrix has a power-of-two side, not {n}.")
    matrix = np.ones((1, 1), dtype=np.float32)
    while matrix.shape[0] < n:
        matrix = np.block([[matrix, matrix], [matrix, -matrix]])
    return matrix * np.float32(1.0 / float(np.sqrt(np.float32(n))))
