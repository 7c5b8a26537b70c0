"""Qwen2 (Q/K/V biases), Qwen3 (per-head Q/K RMSNorm) and Qwen3 MoE: llama-shaped, NEOX rope
(their converter does not permute Q and K). The optional weights live in llama.Llama.

Qwen3 MoE replaces every FFN with experts: a softmax over the router's logits, the top k
experts' probabilities renormalised to sum to one (as llama.cpp always does for qwen3moe),
each expert a SwiGLU through mul_mat_id, their outputs summed by those weights."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import register
from .base import LLM, Metadata, Weights
from .llama import Llama, LlamaBlock, LlamaConfig

if TYPE_CHECKING:
    from pyggml import Tensor


@register("qwen2")
class Qwen2(Llama):
    rope_mode = "neox"


@register("qwen3")
class Qwen3(Llama):
    rope_mode = "neox"


@dataclass
class Qwen3MoeConfig(LlamaConfig):
    experts: int = 0
    experts_used: int = 0
    expert_ffn: int = 0

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "qwen3moe") -> Qwen3MoeConfig:
        base, m = LlamaConfig.from_metadata(meta, arch), Metadata(meta, arch)
        return cls(**vars(base), experts=int(m.require(LLM.EXPERT_COUNT)),
                   experts_used=int(m.require(LLM.EXPERT_USED_COUNT)),
                   expert_ffn=int(m.require(LLM.EXPERT_FEED_FORWARD_LENGTH)))


@dataclass
class Qwen3MoeBlock(LlamaBlock):
    ffn_gate_inp: Tensor | None = None      # the router (experts, E)
    ffn_gate_exps: Tensor | None = None     # (experts, F, E) in numpy order
    ffn_up_exps: Tensor | None = None
    ffn_down_exps: Tensor | None = None


@register("qwen3moe")
class Qwen3Moe(Qwen3):
    config_class = Qwen3MoeConfig
    block_class = Qwen3MoeBlock

    def _bind_block(self, weights: Weights, i: int) -> Qwen3MoeBlock:
        c = self.config
        block = self._bind_attention(weights, i)
        weights.bind(block, f"blk.{i}.", {
            "ffn_gate_inp": (c.experts, c.embd),
            "ffn_gate_exps": (c.experts, c.expert_ffn, c.embd),
            "ffn_up_exps": (c.experts, c.expert_ffn, c.embd),
            "ffn_down_exps": (c.experts, c.embd, c.expert_ffn)})
        return block

    def _ffn(self, block: Qwen3MoeBlock, h):
        """h (T, E) -> (T, E): the chosen experts' outputs, weighted."""
        c, n = self.config, h.shape[0]
        probs = block.ffn_gate_inp.mul_mat(h).soft_max()                     # (T, X)
        chosen = probs.top_k(c.experts_used)                                 # (T, K) int32
        picked = probs.reshape(n, c.experts, 1).get_rows(chosen)             # (T, K, 1)
        weights = picked.div(picked.reshape(n, -1).sum_rows().reshape(n, 1, 1))
        routed = h.reshape(n, 1, c.embd)
        gate = block.ffn_gate_exps.mul_mat_id(routed, chosen)                # (T, K, F)
        up = block.ffn_up_exps.mul_mat_id(routed, chosen)
        out = block.ffn_down_exps.mul_mat_id(gate.swiglu(up), chosen)        # (T, K, E)
        return out.mul(weights).permute(0, 2, 1).cont().sum_rows().reshape(n, c.embd)
