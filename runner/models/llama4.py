"""Llama 4 (text): mixture-of-experts FFNs with a shared expert (top-1 routing, the token
scaled by its expert's sigmoid score before the expert), interleaved with dense FFNs; RoPE
layers attend within chunks and L2-normalize Q and K; every fourth layer has no RoPE,
attends to everything and tunes its queries' temperature by position.

llama.cpp fixes the chunk size (8192), the no-RoPE interval (4) and the temperature's
floor (8192) and scale (0.1); our converter also writes them, and they default to these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .contract import register
from .attention import attention
from .attention import temperature as attention_temperature
from .base import ATTENTION, LLM, Metadata, ModelError
from .llama import Llama, LlamaBlock, LlamaConfig

if TYPE_CHECKING:
    from pyggml import Tensor


@dataclass
class Llama4Block(LlamaBlock):
    ffn_gate_inp: Tensor | None = None      # the router of a mixture-of-experts layer
    ffn_gate_exps: Tensor | None = None
    ffn_up_exps: Tensor | None = None
    ffn_down_exps: Tensor | None = None
    ffn_gate_shexp: Tensor | None = None    # the shared expert
    ffn_up_shexp: Tensor | None = None
    ffn_down_shexp: Tensor | None = None


@dataclass
class Llama4Config(LlamaConfig):
    experts: int = 0
    experts_used: int = 1
    expert_ffn: int = 0
    moe_step: int = 1               # every moe_step-th layer is a mixture of experts
    nope_interval: int = 4          # every nope_interval-th layer has no RoPE
    chunk: int = 8192
    temperature_floor: float = 8192.0
    temperature_scale: float = 0.1
    qk_norm: bool = True

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "llama4") -> "Llama4Config":
        base = LlamaConfig.from_metadata(meta, arch)
        m = Metadata(meta, arch)
        experts, experts_used = m.experts(required=True, used_default=1)
        return cls(**vars(base), experts=experts, experts_used=experts_used,
                   expert_ffn=int(m.require(LLM.EXPERT_FEED_FORWARD_LENGTH)),
                   moe_step=int(m.get(LLM.INTERLEAVE_MOE_LAYER_STEP, 1)),
                   nope_interval=int(m.get("{arch}.no_rope_layer_interval", 4)),
                   chunk=int(m.get("{arch}.attention.chunk_size", 8192)),
                   temperature_floor=float(m.get(ATTENTION.TEMPERATURE_LENGTH, 8192)),
                   temperature_scale=float(m.get(ATTENTION.TEMPERATURE_SCALE, 0.1)),
                   qk_norm=bool(m.get("{arch}.attention.use_qk_norm", True)))

    def uses_rope(self, layer: int) -> bool:
        return (layer + 1) % self.nope_interval != 0

    def window_of(self, layer: int):
        """Layers with rope attend within their chunk; the others see everything."""
        return ("chunk", self.chunk) if self.uses_rope(layer) else None

    def is_moe(self, layer: int) -> bool:
        return (layer + 1) % self.moe_step == 0


@register("llama4")
class Llama4(Llama):
    config_class = Llama4Config
    config: Llama4Config
    block_class = Llama4Block

    def __init__(self, config: Llama4Config, weights):
        if config.experts_used != 1:
            raise ModelError("Llama 4 routes each token to one expert, not "
                             f"{config.experts_used}.")
        super().__init__(config, weights)

    def _bind_block(self, weights, i: int) -> LlamaBlock:
        c = self.config
        if not c.is_moe(i):
            return super()._bind_block(weights, i)
        block = self._bind_attention(weights, i)
        e, f = c.experts, c.expert_ffn
        weights.bind(block, f"blk.{i}.", {
            "ffn_gate_inp": (e, c.embd), "ffn_gate_exps": (e, f, c.embd),
            "ffn_up_exps": (e, f, c.embd), "ffn_down_exps": (e, c.embd, f),
            "ffn_gate_shexp": (f, c.embd), "ffn_up_shexp": (f, c.embd),
            "ffn_down_shexp": (c.embd, f)})
        return block

    def windows(self) -> tuple:
        return (None, self.config.window_of(0))

    def forward(self, inputs, kv):
        c = self.config
        n, d = inputs.n_tokens, c.head_dim
        x = self.token_embd.get_rows(inputs.tokens)                          # (T, E)
        temperature = None
        for i, block in enumerate(self.blocks):
            h = x.rms_norm(c.norm_eps).mul(block.attn_norm)
            q = block.attn_q.mul_mat(h).reshape(n, c.heads, d)                 # (T, H, D)
            k = block.attn_k.mul_mat(h).reshape(n, c.kv_heads, d)              # (T, KVH, D)
            v = block.attn_v.mul_mat(h).reshape(n, c.kv_heads, d)
            if c.uses_rope(i):
                q = c.rope.apply(q, inputs.positions, self.rope_mode, self.rope_freqs)
                k = c.rope.apply(k, inputs.positions, self.rope_mode, self.rope_freqs)
                if c.qk_norm:
                    q, k = q.rms_norm(c.norm_eps), k.rms_norm(c.norm_eps)
            else:
                temperature = temperature or attention_temperature(
                    inputs.positions, n, c.temperature_floor, c.temperature_scale, offset=1.0)
                q = q.mul(temperature)
            a = attention(kv, i, q, k, v, 1.0 / math.sqrt(d), c.window_of(i))  # (T, H*D)
            if i == self._cut_layer:
                a, x = inputs.output_rows(a, x)                              # (n_out, ...)
            x = x.add(block.attn_output.mul_mat(a))
            h = x.rms_norm(c.norm_eps).mul(block.ffn_norm)
            x = x.add(self._experts(block, h) if c.is_moe(i) else self._ffn(
                block.ffn_gate, block.ffn_up, block.ffn_down, h))
        x = x.rms_norm(c.norm_eps).mul(self.output_norm)                     # (n_out, E)
        return self.project(x, inputs)                                       # (n_out, vocab)

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys by deltas; a no-RoPE layer's keys stay as they are."""
        return super().shift(k, deltas, layer) if self.config.uses_rope(layer) else None

    @staticmethod
    def _ffn(gate, up, down, h):
        return down.mul_mat(gate.mul_mat(h).swiglu(up.mul_mat(h)))

    def _experts(self, block, h):
        """The chosen expert's output for each row of h (T, E) scaled by its sigmoid score,
        plus the shared expert's."""
        n = h.shape[0]
        logits = block.ffn_gate_inp.mul_mat(h)                               # (T, experts)
        chosen = logits.top_k(1)                                             # (T, 1) int32
        score = logits.reshape(n, -1, 1).get_rows(chosen).reshape(n, 1).sigmoid()
        routed = h.mul(score).reshape(n, 1, -1)                              # (T, 1, E)
        gate = block.ffn_gate_exps.mul_mat_id(routed, chosen)                # (T, 1, F)
        up = block.ffn_up_exps.mul_mat_id(routed, chosen)
        out = block.ffn_down_exps.mul_mat_id(gate.swiglu(up), chosen)        # (T, 1, E)
        shared = self._ffn(block.ffn_gate_shexp, block.ffn_up_shexp, block.ffn_down_shexp, h)
        return out.reshape(n, -1).add(shared)
