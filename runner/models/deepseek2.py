"""DeepSeek V2 and V3 (R1, Kimi K2, GLM-4.7-Flash as llama.cpp converts them): multi-head
latent attention, shared and routed experts after some dense layers, YaRN.

Attention compresses each token's keys and values into one latent row (kv_lora_rank) and a
small rotated key part shared by all heads. Files from llama.cpp's converter hold kv_b split
into k_b and v_b (the key_length_mla keys say so): the cache then holds the latent rows
themselves, one "head" of rope + rank for keys and rank for values, queries absorb k_b and
the output v_b (llama.cpp's decoding form). Files without them (Ollama's converter) hold
kv_b: keys and values are expanded per head and cached as any model's. Either way the
rotated part comes last in keys and queries, as in llama.cpp (the scores' sums then run in
its order: the same logits to the bit), and a context shift rotates that suffix.

YaRN as llama.cpp applies it to deepseek2: the rotation itself unscaled, and the whole
score scaled by mscale^2, mscale = 1 + 0.1 * mscale_all_dim * ln(factor) (the file's
yarn_log_multiplier is 0.1 * mscale_all_dim)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..kvcache import LayerShape
from .contract import register
from .attention import attention
from .base import (ATTENTION, LLM, ROPE, Block, Metadata, ModelError, Transformer,
                   TransformerConfig, Weights, weight)
from .experts import Routing, route, swiglu_experts
from .rope import RopeConfig

if TYPE_CHECKING:
    from pyggml import Tensor

GATING = {0: "softmax", 1: "softmax", 2: "sigmoid"}    # llama.cpp: none means softmax...
GLM_47_FLASH = ((47, 48), 154880)   # ...except GLM-4.7-Flash's files (layers, vocabulary)


@dataclass
class Deepseek2Config(TransformerConfig):
    rope: RopeConfig
    kq_scale: float
    q_lora_rank: int            # 0: queries by one matrix (V2-Lite)
    kv_lora_rank: int
    nope: int                   # per head: the key dimensions without rotation
    rotated: int                # the rotated ones
    value_dim: int              # per head, after expansion
    latent: bool                # k_b and v_b: cache the latent rows
    dense_layers: int           # the first layers' FFN is dense
    routing: Routing | None
    expert_ffn: int
    shared_experts: int

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "deepseek2") -> Deepseek2Config:
        m = Metadata(meta, arch)
        embd, heads = int(m.require(LLM.EMBEDDING_LENGTH)), int(m.require(ATTENTION.HEAD_COUNT))
        rotated = int(m.require(ROPE.DIMENSION_COUNT))
        latent = bool(m.get(ATTENTION.KEY_LENGTH_MLA)) and bool(m.get(ATTENTION.VALUE_LENGTH_MLA))
        key_dim, value_dim = (int(m.require(key)) for key in (
            (ATTENTION.KEY_LENGTH_MLA, ATTENTION.VALUE_LENGTH_MLA) if latent else
            (ATTENTION.KEY_LENGTH, ATTENTION.VALUE_LENGTH)))
        vocab = m.get(LLM.VOCAB_SIZE) or m.token_count()
        rope, kq_scale = _yarn(m, rotated, key_dim)
        (experts, used), layers = m.experts(), int(m.require(LLM.BLOCK_COUNT))
        gating = m.get(LLM.EXPERT_GATING_FUNC)
        if gating is None and layers in GLM_47_FLASH[0] and vocab == GLM_47_FLASH[1]:
            gating = 2
        routing = Routing(
            experts, used,
            gating=GATING.get(int(gating or 0), "unknown"),
            normalize=bool(m.get(LLM.EXPERT_WEIGHTS_NORM, False)),
            scale=float(m.get(LLM.EXPERT_WEIGHTS_SCALE, 1.0)),
            groups=int(m.get(LLM.EXPERT_GROUP_COUNT, 1) or 1),
            groups_used=int(m.get(LLM.EXPERT_GROUP_USED_COUNT, 1) or 1)) if experts else None
        if routing is not None and routing.gating == "unknown":
            raise ModelError(f"The file's {arch}.expert_gating_func is "
                             f"{m.get(LLM.EXPERT_GATING_FUNC)}; softmax (1) and sigmoid (2) "
                             "are known.")
        return cls(layers=layers, embd=embd,
                   ffn=int(m.require(LLM.FEED_FORWARD_LENGTH)), heads=heads,
                   kv_heads=1 if latent else int(m.get(ATTENTION.HEAD_COUNT_KV, heads)),
                   head_dim=key_dim, vocab=int(vocab),
                   context=int(m.get(LLM.CONTEXT_LENGTH, 2048)),
                   norm_eps=float(m.get(ATTENTION.LAYERNORM_RMS_EPS, 1e-6)), rope=rope,
                   kq_scale=kq_scale, q_lora_rank=int(m.get(ATTENTION.Q_LORA_RANK, 0)),
                   kv_lora_rank=int(m.require(ATTENTION.KV_LORA_RANK)),
                   nope=key_dim - rotated, rotated=rotated, value_dim=value_dim, latent=latent,
                   dense_layers=int(m.get(LLM.LEADING_DENSE_BLOCK_COUNT, 0)), routing=routing,
                   expert_ffn=int(m.get(LLM.EXPERT_FEED_FORWARD_LENGTH, 0)),
                   shared_experts=int(m.get(LLM.EXPERT_SHARED_COUNT, 0)))

    def check(self, m: Metadata) -> None:
        """And experts in whole groups of two or more, of which some but not more than all
        compete (_best_groups' top_k asserts)."""
        super().check(m)
        r = self.routing
        if r is None or r.groups == 1:
            return
        if r.experts % r.groups or r.experts // r.groups < 2:
            raise m.malformed(LLM.EXPERT_GROUP_COUNT, r.groups, "which does not split "
                              f"{m.name(LLM.EXPERT_COUNT)} ({r.experts}) into groups of two "
                              "or more")
        if r.groups_used > r.groups:
            raise m.malformed(LLM.EXPERT_GROUP_USED_COUNT, r.groups_used, "more than "
                              f"{m.name(LLM.EXPERT_GROUP_COUNT)} ({r.groups})")


def _yarn(m: Metadata, rotated: int, key_dim: int) -> tuple[RopeConfig, float]:
    """The rope and the score scale (float32 as llama.cpp computes them)."""
    rope = RopeConfig.from_metadata(m, rotated, 10000.0, head=key_dim)
    f32 = np.float32
    rope.attn_factor = float(m.get(ROPE.SCALING_ATTN_FACTOR, 1.0))
    if not rope.ext_factor:
        return rope, float(f32(1) / np.sqrt(f32(key_dim)))
    factor = f32(1) / f32(rope.freq_scale)
    log_mul = f32(m.get(ROPE.SCALING_YARN_LOG_MUL, 0.0)) / f32(0.1)
    magnitude = f32(1) if log_mul else f32(0.1) * np.log(factor) + f32(1)
    rope.attn_factor = float(magnitude * (f32(1) / (f32(1) + f32(0.1) * np.log(factor)))
                             * f32(rope.attn_factor))
    original = f32(rope.attn_factor) * (f32(1) + f32(0.1) * np.log(factor))
    mscale = original * (f32(1) + f32(0.1) * log_mul * np.log(factor))
    return rope, float(mscale * mscale / np.sqrt(f32(key_dim)))


@dataclass
class Deepseek2Block(Block):
    """Which of the optional weights a layer has follows the file's form (a q rank or not,
    latent or expanded) and the layer's FFN (dense or experts, shared experts or not)."""
    attn_norm: Tensor = weight()
    attn_q: Tensor | None = None            # without a q rank
    attn_q_a: Tensor | None = None          # with one
    attn_q_a_norm: Tensor | None = None
    attn_q_b: Tensor | None = None
    attn_kv_a_mqa: Tensor = weight()        # (rank + rotated, E)
    attn_kv_a_norm: Tensor = weight()
    attn_kv_b: Tensor | None = None         # (H * (nope + Dv), rank): expanded form
    attn_k_b: Tensor | None = None          # (H, rank, nope): latent form
    attn_v_b: Tensor | None = None          # (H, Dv, rank)
    attn_output: Tensor = weight()
    ffn_norm: Tensor = weight()
    ffn_gate: Tensor | None = None          # dense layers
    ffn_up: Tensor | None = None
    ffn_down: Tensor | None = None
    ffn_gate_inp: Tensor | None = None      # expert layers
    exp_probs_b: Tensor | None = None       # the router's choice bias (X,)
    ffn_gate_exps: Tensor | None = None
    ffn_up_exps: Tensor | None = None
    ffn_down_exps: Tensor | None = None
    ffn_gate_shexp: Tensor | None = None
    ffn_up_shexp: Tensor | None = None
    ffn_down_shexp: Tensor | None = None


@register("deepseek2")
class Deepseek2(Transformer):
    config_class = Deepseek2Config
    config: Deepseek2Config
    rope_mode = "normal"        # interleaved pairs, as DeepSeek's checkpoints rotate

    def __init__(self, config: Deepseek2Config, weights: Weights):
        self.config = config
        self.bind_ends(weights)
        self.blocks = [self._bind_block(weights, i) for i in range(config.layers)]

    @classmethod
    def layer_shapes(cls, config: Deepseek2Config) -> list[LayerShape]:
        c = config
        shape = LayerShape(1, c.kv_lora_rank + c.rotated, c.kv_lora_rank, values_in_keys=True) \
            if c.latent else LayerShape(c.kv_heads, c.nope + c.rotated, c.value_dim)
        return [shape] * c.layers

    def _bind_block(self, weights: Weights, i: int) -> Deepseek2Block:
        c, block = self.config, Deepseek2Block()
        rank, q_dim = c.kv_lora_rank, c.heads * (c.nope + c.rotated)
        shapes = {"attn_norm": (c.embd,), "attn_kv_a_mqa": (rank + c.rotated, c.embd),
                  "attn_kv_a_norm": (rank,), "attn_output": (c.embd, c.heads * c.value_dim),
                  "ffn_norm": (c.embd,)}
        if c.q_lora_rank:
            shapes.update(attn_q_a=(c.q_lora_rank, c.embd), attn_q_a_norm=(c.q_lora_rank,),
                          attn_q_b=(q_dim, c.q_lora_rank))
        else:
            shapes.update(attn_q=(q_dim, c.embd))
        if c.latent:
            shapes.update(attn_k_b=(c.heads, rank, c.nope), attn_v_b=(c.heads, c.value_dim, rank))
        else:
            shapes.update(attn_kv_b=(c.heads * (c.nope + c.value_dim), rank))
        if i < c.dense_layers or c.routing is None:
            shapes.update(ffn_gate=(c.ffn, c.embd), ffn_up=(c.ffn, c.embd),
                          ffn_down=(c.embd, c.ffn))
        else:
            x, f, shared = c.routing.experts, c.expert_ffn, c.expert_ffn * c.shared_experts
            shapes.update(ffn_gate_inp=(x, c.embd), ffn_gate_exps=(x, f, c.embd),
                          ffn_up_exps=(x, f, c.embd), ffn_down_exps=(x, c.embd, f))
            if shared:
                shapes.update(ffn_gate_shexp=(shared, c.embd), ffn_up_shexp=(shared, c.embd),
                              ffn_down_shexp=(c.embd, shared))
            block.exp_probs_b = weights.optional(f"blk.{i}.exp_probs_b.bias", (x,))
        weights.bind(block, f"blk.{i}.", shapes)
        return block

    def forward(self, inputs, kv):
        c = self.config
        x = inputs.splice(self.token_embd.get_rows(inputs.tokens))           # (T, E)
        for i, block in enumerate(self.blocks):
            h = x.rms_norm(c.norm_eps).mul(block.attn_norm)
            a = self._attention(block, h, inputs, kv, i)                     # (T, H*Dv)
            if i == self._cut_layer:
                a, x = inputs.output_rows(a, x)                              # (n_out, ...)
            x = x.add(block.attn_output.mul_mat(a))
            h = x.rms_norm(c.norm_eps).mul(block.ffn_norm)
            x = x.add(self._ffn(block, h))
        x = x.rms_norm(c.norm_eps).mul(self.output_norm)                     # (n_out, E)
        return self.project(x, inputs)                                       # (n_out, vocab)

    def _attention(self, block: Deepseek2Block, h, inputs, kv, i: int):
        """h (T, E), the normed residual -> (T, H * Dv), before the output projection."""
        c, n = self.config, inputs.n_tokens
        if c.q_lora_rank:
            assert block.attn_q_a is not None and block.attn_q_b is not None
            q = block.attn_q_a.mul_mat(h).rms_norm(c.norm_eps).mul(block.attn_q_a_norm)
            q = block.attn_q_b.mul_mat(q)
        else:
            assert block.attn_q is not None
            q = block.attn_q.mul_mat(h)
        q = q.reshape(n, c.heads, c.nope + c.rotated)                         # (T, H, Dk)
        q_nope, q_rot = _split(q, c.nope, c.rotated)
        compressed = block.attn_kv_a_mqa.mul_mat(h)                           # (T, R + r)
        latent, k_rot = _split(compressed.reshape(n, 1, -1), c.kv_lora_rank, c.rotated)
        q_rot = c.rope.apply(q_rot, inputs.positions, self.rope_mode)         # (T, H, r)
        k_rot = c.rope.apply(k_rot, inputs.positions, self.rope_mode)         # (T, 1, r)
        latent = latent.rms_norm(c.norm_eps).mul(block.attn_kv_a_norm)        # (T, 1, R)
        if not c.latent:
            return self._expanded(block, q_nope, q_rot, latent, k_rot, kv, i)
        assert block.attn_k_b is not None
        absorbed = block.attn_k_b.mul_mat(q_nope.permute(1, 0, 2))            # (H, T, R)
        q = absorbed.permute(1, 0, 2).concat(q_rot, axis=2)                   # (T, H, R + r)
        k = latent.concat(k_rot, axis=2)                                      # (T, 1, R + r)
        return attention(kv, i, q, k, latent, c.kq_scale,
                         values_out=block.attn_v_b)                           # (T, H * Dv)

    def _expanded(self, block, q_nope, q_rot, latent, k_rot, kv, i: int):
        """Attention over per-head keys and values expanded from the latent rows."""
        c, n = self.config, q_nope.shape[0]
        expanded = block.attn_kv_b.mul_mat(latent.reshape(n, c.kv_lora_rank)) \
            .reshape(n, c.heads, c.nope + c.value_dim)                        # (T, H, nope + Dv)
        k_nope, v = _split(expanded, c.nope, c.value_dim)
        q = q_nope.concat(q_rot, axis=2)                                      # (T, H, Dk)
        k = k_nope.concat(k_rot.repeat(n, c.heads, c.rotated), axis=2)        # (T, H, Dk)
        return attention(kv, i, q, k, v.cont(), c.kq_scale)                   # (T, H * Dv)

    def _ffn(self, block: Deepseek2Block, h):
        """h (T, E) -> (T, E): a dense SwiGLU, or the routed experts plus the shared ones."""
        if block.ffn_gate_inp is None:
            gate, up, down = block.ffn_gate, block.ffn_up, block.ffn_down
            assert gate is not None and up is not None and down is not None
            gated = gate.mul_mat(h).swiglu(up.mul_mat(h))                    # (T, F)
            return down.mul_mat(gated)
        routing = self.config.routing
        assert routing is not None              # a config with experts has their routing
        chosen, weights = route(routing, block.ffn_gate_inp.mul_mat(h),
                                block.exp_probs_b)                            # (T, K), (T, K, 1)
        out = swiglu_experts(block.ffn_gate_exps, block.ffn_up_exps, block.ffn_down_exps, h,
                             chosen, weights)
        if block.ffn_gate_shexp is None:
            return out
        assert block.ffn_up_shexp is not None and block.ffn_down_shexp is not None
        shared = block.ffn_gate_shexp.mul_mat(h).swiglu(block.ffn_up_shexp.mul_mat(h))
        return out.add(block.ffn_down_shexp.mul_mat(shared))

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys k (cells, KVH, Dk) by deltas: their last dimensions."""
        c = self.config
        plain, rotated = _split(k, k.shape[-1] - c.rotated, c.rotated)
        return plain.concat(c.rope.shift(rotated, deltas, self.rope_mode), axis=2)


def _split(x, first: int, second: int):
    """x (..., first + second or more) -> views (..., first) and (..., second) after it."""
    shape, item = x.shape, x.strides[-1]
    return (x.view((*shape[:-1], first), 0, x.strides),
            x.view((*shape[:-1], second), first * item, x.strides))
