"""Gemma 2: Gemma 3's block (gemma3.py) without Q/K norms, with soft-capped attention scores
and logits (tanh(x / cap) * cap), every other layer sliding (the even ones), one rope.

As in llama.cpp, queries are divided by the square root of the head size, except in 27B,
told by its 46 layers, where they are divided by that of embd / heads (144): GGUF does not
record query_pre_attn_scalar."""

from __future__ import annotations

from dataclasses import dataclass

from .contract import register
from .base import ATTENTION, LLM, Metadata
from .gemma3 import Gemma3, Gemma3Config, inverse_sqrt, query_pre_attn_scalar
from .rope import RopeConfig

LAYERS_27B = 46
SLIDING_PATTERN = 2
WINDOW = 4096


@dataclass
class Gemma2Config(Gemma3Config):
    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "gemma2") -> Gemma2Config:
        m = Metadata(meta, arch)
        embd, heads = int(m.require(LLM.EMBEDDING_LENGTH)), int(m.require(ATTENTION.HEAD_COUNT))
        head_dim = int(m.get(ATTENTION.KEY_LENGTH, embd // heads))
        layers = int(m.require(LLM.BLOCK_COUNT))
        rope = RopeConfig.from_metadata(m, head_dim, 10000.0)
        return cls(layers=layers, embd=embd, ffn=int(m.require(LLM.FEED_FORWARD_LENGTH)),
                   heads=heads, kv_heads=int(m.get(ATTENTION.HEAD_COUNT_KV, heads)),
                   head_dim=head_dim, vocab=m.token_count(),
                   context=int(m.get(LLM.CONTEXT_LENGTH, 8192)),
                   norm_eps=float(m.get(ATTENTION.LAYERNORM_RMS_EPS, 1e-6)),
                   window=int(m.get(ATTENTION.SLIDING_WINDOW, WINDOW)),
                   local_rope=rope, rope=rope,
                   query_scale=inverse_sqrt(query_pre_attn_scalar(layers, embd, heads,
                                                                  head_dim, LAYERS_27B)),
                   sliding_pattern=SLIDING_PATTERN,
                   attn_softcap=float(m.get(LLM.ATTN_LOGIT_SOFTCAPPING, 0.0)),
                   final_softcap=float(m.get(LLM.FINAL_LOGIT_SOFTCAPPING, 0.0)))


@register("gemma2")
class Gemma2(Gemma3):
    config_class = Gemma2Config
    config: Gemma2Config
    qk_norms = False
