"""Gemma 3 (text): scaled embeddings, Q/K norms, post-attention and post-FFN norms, GELU-gated
FFN, sliding-window layers with every sixth layer global, and a separate rope base for the
local layers. Gemma 2 (gemma2.py) is this block without Q/K norms, with soft-capped
attention scores and logits, and every other layer sliding.

The norms' weights in GGUF already hold Gemma's `1 + weight` (llama.cpp's converter adds
the one), so they multiply as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from .contract import register
from .attention import attention
from .base import (ATTENTION, LLM, ROPE, Block, Metadata, Transformer, TransformerConfig,
                   Weights, weight)
from .rope import RopeConfig

if TYPE_CHECKING:
    from pyggml import Tensor

SLIDING_PATTERN = 6          # layers i with i % 6 == 5 attend globally
LOCAL_ROPE_BASE = 10000.0    # local layers' rope base when {arch}.rope.freq_base_swa is absent
LAYERS_27B = 62              # Gemma 3 27B: the one size whose query_pre_attn_scalar is not D


def query_pre_attn_scalar(layers: int, embd: int, heads: int, head_dim: int,
                          layers_27b: int = LAYERS_27B) -> int:
    """What queries are divided by the square root of. GGUF does not record it: llama.cpp
    and Ollama both tell 27B (Gemma 3: embd / heads = 168, head size 128) by its layers."""
    return embd // heads if layers == layers_27b else head_dim


def inverse_sqrt(value: int) -> float:
    return float(np.float32(1) / np.sqrt(np.float32(value)))         # as llama.cpp rounds it


@dataclass
class Gemma3Config(TransformerConfig):
    window: int
    local_rope: RopeConfig       # sliding layers': their own base, never scaled (4B to 27B
    rope: RopeConfig             # scale only the global layers' positions, by 1/8)
    query_scale: float
    sliding_pattern: int = SLIDING_PATTERN  # layer i is global when i % pattern == pattern - 1
    attn_softcap: float = 0.0               # of the attention scores; 0: none
    final_softcap: float = 0.0              # of the logits; 0: none

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "gemma3") -> "Gemma3Config":
        m = Metadata(meta, arch)
        embd, heads = int(m.require(LLM.EMBEDDING_LENGTH)), int(m.require(ATTENTION.HEAD_COUNT))
        head_dim = int(m.get(ATTENTION.KEY_LENGTH, 256))
        layers = int(m.require(LLM.BLOCK_COUNT))
        rope = RopeConfig.from_metadata(m, head_dim, 1e6)
        return cls(layers=layers, embd=embd,
                   ffn=int(m.require(LLM.FEED_FORWARD_LENGTH)), heads=heads,
                   kv_heads=int(m.get(ATTENTION.HEAD_COUNT_KV, heads)), head_dim=head_dim,
                   vocab=m.token_count(),
                   context=int(m.get(LLM.CONTEXT_LENGTH, 32768)),
                   norm_eps=float(m.get(ATTENTION.LAYERNORM_RMS_EPS, 1e-6)),
                   window=int(m.get(ATTENTION.SLIDING_WINDOW, 512)),
                   local_rope=replace(rope, base=float(m.get(ROPE.FREQ_BASE_SWA,
                                                             LOCAL_ROPE_BASE)),
                                      freq_scale=1.0),
                   rope=rope,
                   query_scale=inverse_sqrt(query_pre_attn_scalar(layers, embd, heads,
                                                                  head_dim)))

    def is_sliding(self, layer: int) -> bool:
        return layer % self.sliding_pattern != self.sliding_pattern - 1

    def window_of(self, layer: int) -> int | None:
        return self.window if self.is_sliding(layer) else None


@dataclass
class Gemma3Block(Block):
    """Gemma 2 has no Q/K norms; Gemma 3n (Gemma3nBlock) has K and V only in the layers
    that keep a cache."""
    attn_norm: Tensor = weight()
    attn_q: Tensor = weight()
    attn_k: Tensor | None = None
    attn_v: Tensor | None = None
    attn_q_norm: Tensor | None = None
    attn_k_norm: Tensor | None = None
    attn_output: Tensor = weight()
    post_attention_norm: Tensor = weight()
    ffn_norm: Tensor = weight()
    ffn_gate: Tensor = weight()
    ffn_up: Tensor = weight()
    ffn_down: Tensor = weight()
    post_ffw_norm: Tensor = weight()


@register("gemma3")
class Gemma3(Transformer):
    attends_in_streams = True
    config_class = Gemma3Config
    config: Gemma3Config
    rope_mode = "neox"

    qk_norms = True

    def __init__(self, config: Gemma3Config, weights: Weights):
        c = self.config = config
        q_dim, kv_dim = c.heads * c.head_dim, c.kv_heads * c.head_dim
        shapes = {"attn_norm": (c.embd,), "attn_q": (q_dim, c.embd),
                  "attn_k": (kv_dim, c.embd), "attn_v": (kv_dim, c.embd),
                  "attn_output": (c.embd, q_dim), "post_attention_norm": (c.embd,),
                  "ffn_norm": (c.embd,), "ffn_gate": (c.ffn, c.embd), "ffn_up": (c.ffn, c.embd),
                  "ffn_down": (c.embd, c.ffn), "post_ffw_norm": (c.embd,)}
        if self.qk_norms:
            shapes.update(attn_q_norm=(c.head_dim,), attn_k_norm=(c.head_dim,))
        self.bind_ends(weights)
        self.blocks = []
        for i in range(c.layers):
            block = Gemma3Block()
            weights.bind(block, f"blk.{i}.", shapes)
            self.blocks.append(block)

    def windows(self) -> tuple:
        return (None, self.config.window)

    def media_windows(self) -> tuple:
        return self.windows()       # an image's rows see each other on every layer

    def _rope(self, x, positions, layer: int):
        c = self.config
        return (c.local_rope if c.is_sliding(layer) else c.rope).apply(x, positions,
                                                                         self.rope_mode)

    def forward(self, inputs, kv):
        c = self.config
        n, eps = inputs.n_tokens, c.norm_eps
        x = self.token_embd.get_rows(inputs.tokens).scale(math.sqrt(c.embd))     # (T, E)
        x = inputs.splice(x)                          # image rows are not scaled
        for i, block in enumerate(self.blocks):
            h = x.rms_norm(eps).mul(block.attn_norm)
            q = block.attn_q.mul_mat(h).reshape(n, c.heads, c.head_dim)         # (T, H, D)
            k = block.attn_k.mul_mat(h).reshape(n, c.kv_heads, c.head_dim)      # (T, KVH, D)
            v = block.attn_v.mul_mat(h).reshape(n, c.kv_heads, c.head_dim)
            if self.qk_norms:
                q = q.rms_norm(eps).mul(block.attn_q_norm)
                k = k.rms_norm(eps).mul(block.attn_k_norm)
            q = self._rope(q, inputs.positions, i).scale(c.query_scale)
            k = self._rope(k, inputs.positions, i)
            a = attention(kv, i, q, k, v, 1.0, c.window_of(i),       # q carries the scale
                          c.attn_softcap)
            if i == self._cut_layer:
                a, x = inputs.output_rows(a, x)                              # (n_out, ...)
            a = block.attn_output.mul_mat(a).rms_norm(eps).mul(block.post_attention_norm)
            x = x.add(a)
            h = x.rms_norm(eps).mul(block.ffn_norm)
            gated = block.ffn_gate.mul_mat(h).geglu(block.ffn_up.mul_mat(h))     # (T, F)
            f = block.ffn_down.mul_mat(gated)
            x = x.add(f.rms_norm(eps).mul(block.post_ffw_norm))
        x = x.rms_norm(eps).mul(self.output_norm)                              # (n_out, E)
        logits = self.project(x, inputs)                                       # (n_out, vocab)
        if inputs.embeddings or not c.final_softcap:
            return logits
        return logits.scale(1.0 / c.final_softcap).tanh().scale(c.final_softcap)

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys k (cells, KVH, D) by position deltas (cells,)."""
        return self._rope(k, deltas, layer)
