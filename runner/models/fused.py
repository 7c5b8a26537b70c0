"""The fused projections of the models llama.cpp reads with create_tensor_qkv and a gateless
SwiGLU (Phi-3, GLM-4): Q, K and V as one product (attn_qkv, its rows Q's, then K's, then
V's) or three, each with an optional bias; the FFN's gate and up projections as one
(ffn_up, (2F, E): the gate's rows first, as transformers' gate_up_proj.chunk(2) reads
them). The attention's part (AttentionBlock, bind_attention, qkv) is also that of the
models with their own FFN that llama.cpp reads so (Command R, StarCoder2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from .base import Block, TransformerConfig, Weights, weight

if TYPE_CHECKING:
    from pyggml import Tensor


@dataclass
class AttentionBlock(Block):
    attn_norm: Tensor = weight()
    attn_qkv: Tensor | None = None          # (H*D + 2*KVH*D, E), or the three below
    attn_qkv_bias: Tensor | None = None
    attn_q: Tensor | None = None
    attn_q_bias: Tensor | None = None
    attn_k: Tensor | None = None
    attn_k_bias: Tensor | None = None
    attn_v: Tensor | None = None
    attn_v_bias: Tensor | None = None
    attn_output: Tensor = weight()


@dataclass
class FusedBlock(AttentionBlock):
    ffn_norm: Tensor = weight()
    ffn_up: Tensor = weight()               # (2F, E): gate rows, then up rows
    ffn_down: Tensor = weight()


Bound = TypeVar("Bound", bound=AttentionBlock)


def bind_attention(block: Bound, weights: Weights, prefix: str, c: TransformerConfig,
                   more: dict | None = None) -> Bound:
    """Bind block's attention weights under prefix (blk.<i>.): its norm, Q, K and V (one
    tensor or three, optional biases), the output projection, and more (name -> shape:
    the rest of a model's block)."""
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    fused = f"{prefix}attn_qkv.weight" in weights.tensors
    projections = {"attn_qkv": q + 2 * kv} if fused else \
        {"attn_q": q, "attn_k": kv, "attn_v": kv}
    weights.bind(block, prefix, {
        **{name: (rows, c.embd) for name, rows in projections.items()},
        "attn_norm": (c.embd,), "attn_output": (c.embd, q), **(more or {})})
    for name, rows in projections.items():
        setattr(block, f"{name}_bias", weights.optional(f"{prefix}{name}.bias", (rows,)))
    return block


def bind_fused(block: FusedBlock, weights: Weights, prefix: str, c: TransformerConfig,
               more: dict | None = None) -> FusedBlock:
    """Bind block's weights under prefix (blk.<i>.): attention, the fused FFN and more
    (name -> shape, a model's own norms)."""
    return bind_attention(block, weights, prefix, c, {
        "ffn_norm": (c.embd,), "ffn_up": (2 * c.ffn, c.embd), "ffn_down": (c.embd, c.ffn),
        **(more or {})})


def qkv(block: AttentionBlock, h, c: TransformerConfig):
    """h (T, E) -> queries (T, H, D), keys and values (T, KVH, D), biases added. Fused, Q
    and K are views of the product (the rope reads them so, as llama.cpp's); V a copy (the
    cache writes contiguous rows)."""
    n, d = h.shape[0], c.head_dim
    if block.attn_qkv is None:
        parts = ((block.attn_q, block.attn_q_bias, c.heads),
                 (block.attn_k, block.attn_k_bias, c.kv_heads),
                 (block.attn_v, block.attn_v_bias, c.kv_heads))
        return tuple(_linear(w, b, h).reshape(n, heads, d) for w, b, heads in parts)
    mixed = _linear(block.attn_qkv, block.attn_qkv_bias, h)             # (T, (H + 2 KVH) D)
    row, item = mixed.strides[0], mixed.strides[1]
    starts = (0, c.heads, c.heads + c.kv_heads)
    q, k, v = (mixed.view((n, heads, d), start * d * item, (row, d * item, item))
               for start, heads in zip(starts, (c.heads, c.kv_heads, c.kv_heads)))
    return q, k, v.cont()


def gated_ffn(block: FusedBlock, h, f32_down: bool = False):
    """h (T, E) -> (T, E): silu(gate) * up through ffn_down (f32_down: summed in float32 on
    every device, as llama.cpp asks for GLM-4's)."""
    both = block.ffn_up.mul_mat(h)                                        # (T, 2F)
    n, width = both.shape
    row, item = both.strides
    half = width // 2
    gate = both.view((n, half), 0, (row, item))                           # (T, F)
    up = both.view((n, half), half * item, (row, item))
    out = block.ffn_down.mul_mat(gate.swiglu(up))                         # (T, E)
    return out.accumulate_in_f32() if f32_down else out


def _linear(w, bias, h):
    assert w is not None                                   # bind_fused binds one kind
    y = w.mul_mat(h)
    return y if bias is None else y.add(bias)
