"""Llama (and the many models shaped like it): GQA attention, RoPE, SwiGLU FFN, RMSNorm.

Llama 3 rope scaling arrives as the rope_freqs tensor (frequency factors) that llama.cpp's
converter writes; linear and YaRN scaling come from the rope.scaling metadata (rope.py).

What the llama-shaped models add is optional here, read by their configs: biases on every
projection (Granite), layers without rope (SmolLM3, rope_layers), Granite's multipliers
(Multipliers), and experts in place of the dense FFN (Mixtral, as llama.cpp's llama reads
them; Granite MoE), with an optional shared expert.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from .contract import register
from .attention import attention
from .base import (ATTENTION, LLM, ROPE, Block, Metadata, Transformer, TransformerConfig,
                   Weights, weight)
from .experts import Routing, route, swiglu_experts
from .rope import MULTI_MODES, RopeConfig

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
    attn_output_bias: Tensor | None = None  # granite
    ffn_norm: Tensor = weight()
    ffn_gate: Tensor | None = None          # a dense FFN's (not a layer of experts)
    ffn_up: Tensor | None = None
    ffn_down: Tensor | None = None
    ffn_gate_bias: Tensor | None = None     # granite
    ffn_up_bias: Tensor | None = None
    ffn_down_bias: Tensor | None = None
    ffn_gate_inp: Tensor | None = None      # a layer of experts' router (experts, E)
    ffn_gate_exps: Tensor | None = None     # (experts, F, E) in numpy order
    ffn_up_exps: Tensor | None = None
    ffn_down_exps: Tensor | None = None     # (experts, E, F)
    ffn_gate_shexp: Tensor | None = None    # its shared expert (Granite MoE shared)
    ffn_up_shexp: Tensor | None = None
    ffn_down_shexp: Tensor | None = None


@dataclass(frozen=True)
class Multipliers:
    """Granite's scalings, each 1 (or 0 for attention: 1/sqrt(head size)) where a model has
    none: the token embeddings, each sublayer's output before the residual adds it, the
    attention scores, the logits."""
    embedding: float = 1.0
    residual: float = 1.0
    attention: float = 0.0
    logits: float = 1.0


@dataclass
class LlamaConfig(TransformerConfig):
    rope: RopeConfig
    routing: Routing | None = None          # a layer of experts in place of each dense FFN
    shared_expert_ffn: int = 0              # its shared expert's width (0: none)
    multipliers: Multipliers = Multipliers()
    rope_layers: tuple[bool, ...] | None = None     # which layers rotate (None: all)

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "llama") -> "LlamaConfig":
        m = Metadata(meta, arch)
        embd, heads = int(m.require(LLM.EMBEDDING_LENGTH)), int(m.require(ATTENTION.HEAD_COUNT))
        head_dim = int(m.get(ATTENTION.KEY_LENGTH, embd // heads))
        vocab = m.get(LLM.VOCAB_SIZE) or m.token_count()
        config = cls(layers=int(m.require(LLM.BLOCK_COUNT)), embd=embd,
                     ffn=int(m.require(LLM.FEED_FORWARD_LENGTH)), heads=heads,
                     kv_heads=int(m.get(ATTENTION.HEAD_COUNT_KV, heads)), head_dim=head_dim,
                     vocab=int(vocab), context=int(m.get(LLM.CONTEXT_LENGTH, 2048)),
                     norm_eps=float(m.get(ATTENTION.LAYERNORM_RMS_EPS, 1e-5)),
                     rope=RopeConfig.from_metadata(m, head_dim, 10000.0))
        # llama.cpp's llama reads experts (Mixtral's); the models built on this config that
        # have experts read their own kind of them
        return config.with_experts(m) if arch == "llama" else config

    def with_experts(self, m: Metadata) -> "LlamaConfig":
        """Experts in place of the dense FFNs where the file has them (expert_count), as
        llama.cpp's llama and granite read them: their width is feed_forward_length, a
        softmax over all chooses the top k, renormalised, then scaled by
        expert_weights_scale where it is neither 0 nor 1; a shared expert where
        expert_shared_feed_forward_length is set."""
        experts, used = m.experts()
        if not experts:
            return self
        scale = float(m.get(LLM.EXPERT_WEIGHTS_SCALE, 0.0)) or 1.0
        return replace(self, routing=Routing(experts, used, scale=scale),
                       shared_expert_ffn=int(m.get(LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, 0)))

    def uses_rope(self, layer: int) -> bool:
        return self.rope_layers is None or self.rope_layers[layer]

    @property
    def kq_scale(self) -> float:
        """The attention scores' scale: 1/sqrt(head size) in float32, as llama.cpp
        computes it, where the model gives none."""
        f32 = np.float32
        return self.multipliers.attention or float(f32(1) / np.sqrt(f32(self.head_dim)))


@register("llama")
class Llama(Transformer):
    """Also the base of the llama-shaped models that differ only in what is optional here:
    Q/K/V biases (qwen2), per-head Q/K RMSNorm (qwen3), the rope mode."""
    attends_in_streams = True

    config_class = LlamaConfig
    config: LlamaConfig
    block_class: type[LlamaBlock] = LlamaBlock
    rope_mode = "normal"     # llama.cpp's converter permutes Q and K for interleaved rope
    ffn_norm_name = "ffn_norm"      # the GGUF tensor of the norm before the FFN

    @classmethod
    def config_of(cls, meta: dict):
        m = Metadata(meta, meta["general.architecture"])
        config = cls.config_class.from_metadata(meta, m.arch)
        if config.rope.sections and cls.rope_mode not in MULTI_MODES:
            raise m.malformed(ROPE.DIMENSION_SECTIONS, list(config.rope.sections),
                              f"but {cls.__name__}'s rope turns positions of one axis")
        return config

    def __init__(self, config: LlamaConfig, weights: Weights):
        self.config = config
        self.bind_ends(weights)
        self.rope_freqs = weights.optional("rope_freqs.weight", (config.rope.dims // 2,), "F32")
        self.blocks = [self._bind_block(weights, i) for i in range(config.layers)]

    def _bind_block(self, weights: Weights, i: int) -> LlamaBlock:
        """A block's attention and its dense FFN (optional biases) or its experts (the
        experts' width is feed_forward_length, as llama.cpp's llama and granite read it)."""
        c, prefix = self.config, f"blk.{i}."
        block = self._bind_attention(weights, i)
        if c.routing is None:
            weights.bind(block, prefix, {"ffn_gate": (c.ffn, c.embd), "ffn_up": (c.ffn, c.embd),
                                         "ffn_down": (c.embd, c.ffn)})
            block.ffn_gate_bias = weights.optional(f"{prefix}ffn_gate.bias", (c.ffn,))
            block.ffn_up_bias = weights.optional(f"{prefix}ffn_up.bias", (c.ffn,))
            block.ffn_down_bias = weights.optional(f"{prefix}ffn_down.bias", (c.embd,))
            return block
        x, f = c.routing.experts, c.ffn
        weights.bind(block, prefix, {
            "ffn_gate_inp": (x, c.embd), "ffn_gate_exps": (x, f, c.embd),
            "ffn_up_exps": (x, f, c.embd), "ffn_down_exps": (x, c.embd, f)})
        if c.shared_expert_ffn:
            s = c.shared_expert_ffn
            weights.bind(block, prefix, {"ffn_gate_shexp": (s, c.embd),
                                         "ffn_up_shexp": (s, c.embd),
                                         "ffn_down_shexp": (c.embd, s)})
        return block

    def _bind_attention(self, weights: Weights, i: int) -> LlamaBlock:
        """A block's attention weights (optional biases and Q/K norms) and its FFN norm."""
        c = self.config
        q_dim, kv_dim = c.heads * c.head_dim, c.kv_heads * c.head_dim
        block = self.block_class()
        weights.bind(block, f"blk.{i}.", {
            "attn_norm": (c.embd,), "attn_q": (q_dim, c.embd), "attn_k": (kv_dim, c.embd),
            "attn_v": (kv_dim, c.embd), "attn_output": (c.embd, q_dim)}, optional={
            "attn_q_norm": (c.head_dim,), "attn_k_norm": (c.head_dim,)})
        block.ffn_norm = weights.take(f"blk.{i}.{self.ffn_norm_name}.weight", (c.embd,))
        block.attn_q_bias = weights.optional(f"blk.{i}.attn_q.bias", (q_dim,))
        block.attn_k_bias = weights.optional(f"blk.{i}.attn_k.bias", (kv_dim,))
        block.attn_v_bias = weights.optional(f"blk.{i}.attn_v.bias", (kv_dim,))
        block.attn_output_bias = weights.optional(f"blk.{i}.attn_output.bias", (c.embd,))
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
        x = scaled(inputs.splice(self.token_embd.get_rows(inputs.tokens)),  # (T, E)
                   c.multipliers.embedding)
        cut, residual = self._cut_layer, c.multipliers.residual
        if c.rope_layers is not None and not any(c.rope_layers):
            inputs.first.append(inputs.positions)    # read by no layer: the engine fills them
        for i, block in enumerate(self.blocks):
            h = x.rms_norm(c.norm_eps).mul(block.attn_norm)
            eps, kvh, d = c.norm_eps, c.kv_heads, c.head_dim
            q = self._project(block.attn_q, block.attn_q_bias, block.attn_q_norm, h, c.heads,
                              d, eps)                                         # (T, H, D)
            k = self._project(block.attn_k, block.attn_k_bias, block.attn_k_norm, h, kvh, d,
                              eps)                                            # (T, KVH, D)
            v = self._project(block.attn_v, block.attn_v_bias, None, h, kvh, d, eps)
            if c.uses_rope(i):
                q = c.rope.apply(q, inputs.positions, self.rope_mode, self.rope_freqs)
                k = c.rope.apply(k, inputs.positions, self.rope_mode, self.rope_freqs)
            a = attention(kv, i, self._queries(q, inputs), k, v, c.kq_scale)  # (T, H*D)
            if i == cut:
                a, x = inputs.output_rows(a, x)                              # (n_out, ...)
            x = x.add(scaled(linear(block.attn_output, block.attn_output_bias, a), residual))
            h = x.rms_norm(c.norm_eps).mul(block.ffn_norm)
            x = self._layer_output(i, x.add(scaled(self._ffn(block, h), residual)), inputs)
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
        """h (T, E), the normed residual -> (T, E): SwiGLU, or the experts'."""
        if self.config.routing is not None:
            return self._experts(block, h)
        gate, up, down = block.ffn_gate, block.ffn_up, block.ffn_down      # bound: dense
        assert gate is not None and up is not None and down is not None
        gated = linear(gate, block.ffn_gate_bias, h).swiglu(
            linear(up, block.ffn_up_bias, h))                                 # (T, F)
        return linear(down, block.ffn_down_bias, gated)

    def _experts(self, block: LlamaBlock, h):
        """h (T, E) -> (T, E): the chosen experts' outputs, weighted, and the shared
        expert's."""
        routing, router = self.config.routing, block.ffn_gate_inp
        assert routing is not None and router is not None                  # bound: experts
        chosen, weights = route(routing, router.mul_mat(h))                 # (T, K), (T, K, 1)
        out = swiglu_experts(block.ffn_gate_exps, block.ffn_up_exps, block.ffn_down_exps, h,
                             chosen, weights)                               # (T, E)
        gate, up, down = block.ffn_gate_shexp, block.ffn_up_shexp, block.ffn_down_shexp
        if gate is None or up is None or down is None:
            return out
        return out.add(down.mul_mat(gate.mul_mat(h).swiglu(up.mul_mat(h))))

    def project(self, x, inputs):
        """Logits (n_out, vocab) times the model's logit multiplier (Granite's)."""
        logits = super().project(x, inputs)
        return logits if inputs.embeddings else scaled(logits, self.config.multipliers.logits)

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys k (cells, KVH, D) by position deltas (cells,); a layer
        without rope keeps its keys."""
        if not self.config.uses_rope(layer):
            return None
        return self.config.rope.shift(k, deltas, self.rope_mode, self.rope_freqs)


def linear(weight, bias, x):
    """x (T, in) -> (T, out): the product and its bias, where there is one."""
    y = weight.mul_mat(x)
    return y if bias is None else y.add(bias)


def scaled(x, multiplier: float):
    """x times multiplier (no node where it is 1)."""
    return x if multiplier == 1.0 else x.scale(multiplier)
