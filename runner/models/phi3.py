"""Phi-3 and Phi-3.5 (mini, medium), Phi-4 and Phi-4-mini, as llama.cpp's phi3 runs them: Q, K
and V from one product and the FFN's gate and up from another (fused.py), NEOX rope over
the first rope.dimension_count dimensions of each head (Phi-4-mini: 96 of 128), queries
scaled by 1/sqrt(head size) before attention, RMSNorm.

LongRoPE (the 128k models): the file holds two sets of per-frequency factors,
rope_factors_short and rope_factors_long, and an attention factor
(rope.scaling.attn_factor) that scales every rotation whichever set is used. llama.cpp picks
the set by the context, once: the long factors where one sequence may hold more positions
(n_ctx_seq, padded to 256) than the original context (rope.scaling.original_context_length),
else the short ones. transformers picks by the length of the sequence at hand instead; a
prompt within the original context in a larger context is rotated otherwise there. A
context shift re-rotates keys with the set that rotated them.

The sliding window a file may give (attention.sliding_window) is not applied: llama.cpp
disables it for phi3 ("Phi SWA is currently disabled"), so its files are run with full
attention, as there."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..kvcache.cells import PAD
from .attention import attention
from .base import ATTENTION, LLM, Metadata, Transformer, Weights
from .contract import register
from .fused import FusedBlock, bind_fused, gated_ffn, qkv
from .llama import LlamaConfig

if TYPE_CHECKING:
    from pyggml import Tensor


@dataclass
class Phi3Config(LlamaConfig):
    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "phi3") -> Phi3Config:
        Metadata(meta, arch).require(ATTENTION.LAYERNORM_RMS_EPS)       # llama.cpp's too
        return cls(**vars(LlamaConfig.from_metadata(meta, arch)))

    def check(self, m: Metadata) -> None:
        """llama.cpp sizes Q and the output projection by embedding_length."""
        super().check(m)
        if self.heads * self.head_dim != self.embd:
            raise m.malformed(ATTENTION.HEAD_COUNT, self.heads, f"whose heads of "
                              f"{self.head_dim} do not make up {m.name(LLM.EMBEDDING_LENGTH)} "
                              f"({self.embd}), as phi3's projections need")

    def uses_long_factors(self, sequence_context: int) -> bool:
        """LongRoPE's long factors for a context of sequence_context positions a sequence."""
        return -(-sequence_context // PAD) * PAD > self.rope.original_context   # padded


@register("phi3")
class Phi3(Transformer):
    attends_in_streams = True
    config_class = Phi3Config
    config: Phi3Config
    rope_mode = "neox"
    # the factors the last graph rotated with: a context shift re-rotates with the same
    _rotated_with: Tensor | None = None

    @classmethod
    def config_of(cls, meta: dict):
        return Phi3Config.from_metadata(meta, meta["general.architecture"])

    def __init__(self, config: Phi3Config, weights: Weights):
        c = self.config = config
        self.bind_ends(weights)
        pairs = (c.rope.dims // 2,)
        self.rope_factors_long = weights.optional("rope_factors_long.weight", pairs, "F32")
        self.rope_factors_short = weights.optional("rope_factors_short.weight", pairs, "F32")
        self.blocks = [bind_fused(FusedBlock(), weights, f"blk.{i}.", c)
                       for i in range(c.layers)]

    def factors_for(self, sequence_context: int) -> Tensor | None:
        """The rope's frequency factors for a context (None: the file has that set not)."""
        if self.config.uses_long_factors(sequence_context):
            return self.rope_factors_long
        return self.rope_factors_short

    def forward(self, inputs, kv):
        c, d = self.config, self.config.head_dim
        factors = self._rotated_with = self.factors_for(kv.cache.sequence_context)
        x = inputs.splice(self.token_embd.get_rows(inputs.tokens))           # (T, E)
        for i, block in enumerate(self.blocks):
            h = x.rms_norm(c.norm_eps).mul(block.attn_norm)
            q, k, v = qkv(block, h, c)                                       # (T, H|KVH, D)
            q = c.rope.apply(q, inputs.positions, self.rope_mode, factors)
            k = c.rope.apply(k, inputs.positions, self.rope_mode, factors)
            a = attention(kv, i, q.scale(1.0 / math.sqrt(d)), k, v, 1.0)    # (T, H*D)
            if i == self._cut_layer:
                a, x = inputs.output_rows(a, x)                              # (n_out, ...)
            x = x.add(block.attn_output.mul_mat(a))
            h = x.rms_norm(c.norm_eps).mul(block.ffn_norm)
            x = x.add(gated_ffn(block, h))
        x = x.rms_norm(c.norm_eps).mul(self.output_norm)                     # (n_out, E)
        return self.project(x, inputs)                                       # (n_out, vocab)

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys k (cells, KVH, D) by position deltas (cells,), with the
        factors that rotated them."""
        return self.config.rope.shift(k, deltas, self.rope_mode, self._rotated_with)
