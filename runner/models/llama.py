"""Llama (and the many models shaped like it): GQA attention, RoPE, SwiGLU FFN, RMSNorm.

Llama 3 rope scaling arrives as the rope_freqs tensor (frequency factors) that llama.cpp's
converter writes; linear and YaRN scaling come from the rope.scaling metadata (rope.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .contract import register
from .attention import attention
from .base import ATTENTION, LLM, Block, Metadata, Transformer, TransformerConfig, Weights, weight
from .rope import RopeConfig

if TYPE_CHECKING:
    from pyggml import Tensor


@dataclass
class LlamaBlock(Block):
    attn_norm: Tensor = weight()
    attn_q: Tensor = weight()
    attn_k: Tensor = weight()
    attn_v: Tensor = weight()
    attn_q_bias: Tensor | None = None       # qwen2
    attn_k_bias: Tensor | None = None
    attn_v_bias: Tensor | None = None
    attn_q_norm: Tensor | None = None       # qwen3, per head
    attn_k_norm: Tensor | None = None
    attn_output: Tensor = weight()
    ffn_norm: Tensor = weight()
    ffn_gate: Tensor | None = None          # a dense FFN's (not a layer of experts)
    ffn_up: Tensor | None = None
    ffn_down: Tensor | None = None


@dataclass
class LlamaConfig(TransformerConfig):
    rope: RopeConfig

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "llama") -> "LlamaConfig":
        m = Metadata(meta, arch)
        embd, heads = int(m.require(LLM.EMBEDDING_LENGTH)), int(m.require(ATTENTION.HEAD_COUNT))
        head_dim = int(m.get(ATTENTION.KEY_LENGTH, embd // heads))
        vocab = m.get(LLM.VOCAB_SIZE) or m.token_count()
        return cls(layers=int(m.require(LLM.BLOCK_COUNT)), embd=embd,
                   ffn=int(m.require(LLM.FEED_FORWARD_LENGTH)), heads=heads,
                   kv_heads=int(m.get(ATTENTION.HEAD_COUNT_KV, heads)), head_dim=head_dim,
                   vocab=int(vocab), context=int(m.get(LLM.CONTEXT_LENGTH, 2048)),
                   norm_eps=float(m.get(ATTENTION.LAYERNORM_RMS_EPS, 1e-5)),
                   rope=RopeConfig.from_metadata(m, head_dim, 10000.0))


@register("llama")
class Llama(Transformer):
    """Also the base of the llama-shaped models that differ only in what is optional here:
    Q/K/V biases (qwen2), per-head Q/K RMSNorm (qwen3), the rope mode."""
    attends_in_streams = True

    config_class = LlamaConfig
    config: LlamaConfig
    block_class: type[LlamaBlock] = LlamaBlock
    rope_mode = "normal"     # llama.cpp's converter permutes Q and K for interleaved rope

    @classmethod
    def config_of(cls, meta: dict):
        return cls.config_class.from_metadata(meta, meta["general.architecture"])

    def __init__(self, config: LlamaConfig, weights: Weights):
        self.config = config
        self.bind_ends(weights)
        self.rope_freqs = weights.optional("rope_freqs.weight", (config.rope.dims // 2,), "F32")
        self.blocks = [self._bind_block(weights, i) for i in range(config.layers)]

    def _bind_block(self, weights: Weights, i: int) -> LlamaBlock:
        c = self.config
        block = self._bind_attention(weights, i)
        weights.bind(block, f"blk.{i}.", {
            "ffn_gate": (c.ffn, c.embd), "ffn_up": (c.ffn, c.embd), "ffn_down": (c.embd, c.ffn)})
        return block

    def _bind_attention(self, weights: Weights, i: int) -> LlamaBlock:
        """A block's attention weights (optional biases and Q/K norms) and its FFN norm."""
        c = self.config
        q_dim, kv_dim = c.heads * c.head_dim, c.kv_heads * c.head_dim
        block = self.block_class()
        weights.bind(block, f"blk.{i}.", {
            "attn_norm": (c.embd,), "attn_q": (q_dim, c.embd), "attn_k": (kv_dim, c.embd),
            "attn_v": (kv_dim, c.embd), "attn_output": (c.embd, q_dim),
            "ffn_norm": (c.embd,)}, optional={
            "attn_q_norm": (c.head_dim,), "attn_k_norm": (c.head_dim,)})
        block.attn_q_bias = weights.optional(f"blk.{i}.attn_q.bias", (q_dim,))
        block.attn_k_bias = weights.optional(f"blk.{i}.attn_k.bias", (kv_dim,))
        block.attn_v_bias = weights.optional(f"blk.{i}.attn_v.bias", (kv_dim,))
        return block

    @staticmethod
    def _project(weight, bias, norm, h, heads: int, head_dim: int, eps: float):
        """h (T, E) -> (T, heads, head_dim): the product, its bias, its per-head norm."""
        x = weight.mul_mat(h)
        if bias is not None:
            x = x.add(bias)
        x = x.reshape(h.shape[0], heads, head_dim)
        return x if norm is None else x.rms_norm(eps).mul(norm)

    def forward(self, inputs, kv):
        c = self.config
        x = inputs.splice(self.token_embd.get_rows(inputs.tokens))           # (T, E)
        cut = self._cut_layer
        for i, block in enumerate(self.blocks):
            h = x.rms_norm(c.norm_eps).mul(block.attn_norm)
            eps, kvh, d = c.norm_eps, c.kv_heads, c.head_dim
            q = self._project(block.attn_q, block.attn_q_bias, block.attn_q_norm, h, c.heads,
                              d, eps)                                         # (T, H, D)
            k = self._project(block.attn_k, block.attn_k_bias, block.attn_k_norm, h, kvh, d,
                              eps)                                            # (T, KVH, D)
            v = self._project(block.attn_v, block.attn_v_bias, None, h, kvh, d, eps)
            q = self._queries(c.rope.apply(q, inputs.positions, self.rope_mode,
                                           self.rope_freqs), inputs)
            k = c.rope.apply(k, inputs.positions, self.rope_mode, self.rope_freqs)
            a = attention(kv, i, q, k, v, 1.0 / math.sqrt(c.head_dim))        # (T, H*D)
            if i == cut:
                a, x = inputs.output_rows(a, x)                              # (n_out, ...)
            x = x.add(block.attn_output.mul_mat(a))
            h = x.rms_norm(c.norm_eps).mul(block.ffn_norm)
            x = self._layer_output(i, x.add(self._ffn(block, h)), inputs)
        if cut is None:
            x, = inputs.output_rows(x)                                       # (n_out, E)
        x = x.rms_norm(c.norm_eps).mul(self.output_norm)                     # (n_out, E)
        return self.project(x, inputs)                                       # (n_out, vocab)

    def position_axes(self) -> int:
        return self.config.rope.axes

    def _layer_output(self, i: int, x, inputs):
        """Layer i's output x (T, E) as the next layer reads it (Qwen3-VL adds to it; the
        cut layer's is (n_out, E))."""
        return x

    def _queries(self, q, inputs):
        """The rotated queries (T, H, D) as attention takes them (Mistral 3 scales them)."""
        return q

    def _ffn(self, block: LlamaBlock, h):
        """h (T, E), the normed residual -> (T, E): SwiGLU."""
        gate, up, down = block.ffn_gate, block.ffn_up, block.ffn_down      # bound: dense
        assert gate is not None and up is not None and down is not None
        gated = gate.mul_mat(h).swiglu(up.mul_mat(h))                        # (T, F)
        return down.mul_mat(gated)

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys k (cells, KVH, D) by position deltas (cells,)."""
        return self.config.rope.shift(k, deltas, self.rope_mode, self.rope_freqs)
