"""The operations of recurrent layers (mixed into pyggml.tensor.Tensor, as ops.py is): a
gated DeltaNet's recurrence, the short causal convolution in front of it, L2 norms and
running sums.

Shapes in the comments are numpy order (see tensor.py): ggml's ne reversed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._lib import lib

if TYPE_CHECKING:
    from .context import Context
    from .tensor import Tensor


class RecurrentOps:
    __slots__ = ()

    if TYPE_CHECKING:
        # what these operations use of Tensor, the one class they are mixed into (_unary
        # is TensorOps')
        _ptr: Any
        ndim: int

        def _home(self, other: Tensor | None = None, *more: Tensor | None) -> Context: ...
        def _result(self, ctx: Context, raw: Any, ndim: int, what: str | tuple[str, object],
                    *operands: Tensor | None) -> Tensor: ...
        def _unary(self, fn: Callable[[Any, Any], Any], name: str) -> Tensor: ...

    def l2_norm(self, eps: float) -> Tensor:
        """x / max(||x||, eps) over the last dimension."""
        ctx = self._home()
        return self._result(ctx, lib.safe_ggml_l2_norm(ctx.ptr, self._ptr, eps), self.ndim,
                            "l2_norm")

    def cumsum(self) -> Tensor:
        """The running sum over the last dimension (float32)."""
        return self._unary(lib.safe_ggml_cumsum, "cumsum")

    def ssm_conv(self, kernel: Tensor) -> Tensor:
        """A causal depthwise convolution, sequence by sequence: self (S, C, K - 1 + T), each
        channel's K - 1 earlier inputs then its T new ones, kernel (C, K) -> (S, T, C):
        out[s, t, c] = sum_j self[s, c, t + j] * kernel[c, j]."""
        ctx = self._home(kernel)
        raw = lib.safe_ggml_ssm_conv(ctx.ptr, self._ptr, kernel._ptr)
        return self._result(ctx, raw, 3, "ssm_conv", kernel)

    def gated_delta_net(self, k: Tensor, v: Tensor, gate: Tensor, beta: Tensor, state: Tensor,
                        snapshots: int = 1) -> Tensor:
        """The gated delta rule over the tokens of S sequences, from each one's state: self q
        and k (S, T, Hk, D), v (S, T, H, D) (value head h reads query and key head h % Hk),
        gate (S, T, H, 1) the log of each step's decay (or (S, T, H, D), one per key
        dimension), beta (S, T, H, 1), state (S, H, D, D) float32, each head's matrix stored
        transposed (state[s, h, j, i] = M[i, j]). Per token: M = exp(gate) * M;
        M += k ⊗ beta (v - Mᵀk); out = Mᵀq / sqrt(D).
        -> float32 (S * T + snapshots * S * D, H * D): the T outputs of each sequence in
        turn, then the state after its last token for every sequence (snapshots > 1: then
        the states one, two... tokens earlier, each S * D rows)."""
        ctx = self._home(k, v, gate, beta, state)
        raw = lib.safe_ggml_gated_delta_net(ctx.ptr, self._ptr, k._ptr, v._ptr, gate._ptr,
                                            beta._ptr, state._ptr, snapshots)
        return self._result(ctx, raw, 2, "gated_delta_net", k, v, gate, beta, state)
