"""gpt-oss (20B, 120B): a llama-shaped decoder with biases on every attention projection,
a learned sink logit per head (it joins each softmax and takes its share of the weight to
no value), every other layer sliding (the even ones, a window of 128), YaRN rope (NEOX), and
experts in every layer: the router (with a bias) picks the top k by its raw logits and
weighs them by a softmax over those k; each expert is a clamped SwiGLU (ggml_swiglu_oai:
alpha 1.702, limit 7) with biases on its gate, up and down projections, as llama.cpp's
build_moe_ffn runs them.

Ollama's files (converted from OpenAI's own checkpoints; older ones say architecture gptoss)
hold Q, K and V as one attn_qkv, and may name the output attn_out, the sinks attn_sinks and
the FFN's norm ffn_norm: read alike."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .contract import register
from .attention import attention
from .base import ATTENTION, LLM, Block, Metadata, Transformer, Weights, weight
from .experts import Routing, route, weighted_sum
from .llama import LlamaConfig

if TYPE_CHECKING:
    from pyggml import Tensor

SLIDING_PATTERN = 2          # layers i with i % 2 == 0 slide
SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0


@dataclass
class GptOssConfig(LlamaConfig):
    window: int = 128
    expert_ffn: int = 0

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "gpt-oss") -> GptOssConfig:
        m = Metadata(meta, arch)
        base = LlamaConfig.from_metadata(meta, arch)
        experts, used = m.experts(required=True)
        return cls(**{**vars(base), "routing": Routing(experts, used, gating="softmax_weight",
                                                       normalize=False)},
                   window=int(m.require(ATTENTION.SLIDING_WINDOW)),
                   expert_ffn=int(m.require(LLM.EXPERT_FEED_FORWARD_LENGTH)))

    def window_of(self, layer: int) -> int | None:
        return self.window if layer % SLIDING_PATTERN == 0 else None


# names Ollama's files (older ones) give tensors that llama.cpp's converter names otherwise
OLLAMA_NAMES = {"attn_output.weight": "attn_out.weight", "attn_output.bias": "attn_out.bias",
                "attn_sinks.weight": "attn_sinks", "post_attention_norm.weight": "ffn_norm.weight"}


@dataclass
class GptOssBlock(Block):
    attn_norm: Tensor = weight()
    attn_qkv: Tensor | None = None            # Ollama's: Q, K and V in one (q + 2 kv, E)
    attn_qkv_bias: Tensor | None = None
    attn_q: Tensor | None = None              # the others': Q, K and V apart
    attn_q_bias: Tensor | None = None
    attn_k: Tensor | None = None
    attn_k_bias: Tensor | None = None
    attn_v: Tensor | None = None
    attn_v_bias: Tensor | None = None
    attn_output: Tensor = weight()
    attn_output_bias: Tensor = weight()
    attn_sinks: Tensor = weight()             # (H,)
    post_attention_norm: Tensor = weight()
    ffn_gate_inp: Tensor = weight()           # (X, E) and its bias (X,)
    ffn_gate_inp_bias: Tensor = weight()
    ffn_gate_exps: Tensor = weight()          # (X, F, E), biases (X, F)
    ffn_gate_exps_bias: Tensor = weight()
    ffn_up_exps: Tensor = weight()
    ffn_up_exps_bias: Tensor = weight()
    ffn_down_exps: Tensor = weight()          # (X, E, F), bias (X, E)
    ffn_down_exps_bias: Tensor = weight()


@register("gpt-oss")
class GptOss(Transformer):
    attends_in_streams = True
    config_class = GptOssConfig
    config: GptOssConfig
    rope_mode = "neox"

    @classmethod
    def config_of(cls, meta: dict):
        return GptOssConfig.from_metadata(meta, meta["general.architecture"])

    def windows(self) -> tuple:
        return (None, self.config.window)

    def __init__(self, config: GptOssConfig, weights: Weights):
        c = self.config = config
        self.bind_ends(weights)
        self.blocks = [self._bind_block(weights, i) for i in range(c.layers)]

    def _bind_block(self, weights: Weights, i: int) -> GptOssBlock:
        c = self.config
        assert c.routing is not None                              # from_metadata sets it
        e, q, kv, x, f = (c.embd, c.heads * c.head_dim, c.kv_heads * c.head_dim,
                          c.routing.experts, c.expert_ffn)
        prefix, block = f"blk.{i}.", GptOssBlock()

        def take(name: str, shape):
            found = prefix + name
            if found not in weights.tensors:
                found = prefix + OLLAMA_NAMES.get(name, name)
            return weights.take(found, shape)

        projections = {"attn_q": (q, e), "attn_k": (kv, e), "attn_v": (kv, e)}
        if prefix + "attn_qkv.weight" in weights.tensors:
            projections = {"attn_qkv": (q + 2 * kv, e)}
        for name, shape in {**projections, "attn_output": (e, q), "ffn_gate_inp": (x, e),
                            "ffn_gate_exps": (x, f, e), "ffn_up_exps": (x, f, e),
                            "ffn_down_exps": (x, e, f)}.items():
            setattr(block, name, take(f"{name}.weight", shape))
            setattr(block, f"{name}_bias", take(f"{name}.bias", shape[:-1]))
        block.attn_norm = take("attn_norm.weight", (e,))
        block.post_attention_norm = take("post_attention_norm.weight", (e,))
        block.attn_sinks = take("attn_sinks.weight", (c.heads,))
        return block

    def _qkv(self, block: GptOssBlock, h):
        """h (T, E) -> queries (T, H, D), keys and values (T, KVH, D)."""
        c, n, d = self.config, h.shape[0], self.config.head_dim
        if block.attn_qkv is None:
            assert block.attn_q is not None and block.attn_k is not None and \
                block.attn_v is not None
            return tuple(weight.mul_mat(h).add(bias).reshape(n, heads, d) for weight, bias, heads
                         in ((block.attn_q, block.attn_q_bias, c.heads),
                             (block.attn_k, block.attn_k_bias, c.kv_heads),
                             (block.attn_v, block.attn_v_bias, c.kv_heads)))
        qkv = block.attn_qkv.mul_mat(h).add(block.attn_qkv_bias)        # (T, (H + 2 KVH) D)
        row, item = qkv.strides[0], qkv.strides[1]
        starts = (0, c.heads, c.heads + c.kv_heads)
        return tuple(qkv.view((n, heads, d), start * d * item, (row, d * item, item)).cont()
                     for start, heads in zip(starts, (c.heads, c.kv_heads, c.kv_heads)))

    def forward(self, inputs, kv):
        c = self.config
        d = c.head_dim
        x = inputs.splice(self.token_embd.get_rows(inputs.tokens))           # (T, E)
        for i, block in enumerate(self.blocks):
            h = x.rms_norm(c.norm_eps).mul(block.attn_norm)
            q, k, v = self._qkv(block, h)                                    # (T, H|KVH, D)
            q = c.rope.apply(q, inputs.positions, self.rope_mode)
            k = c.rope.apply(k, inputs.positions, self.rope_mode)
            a = attention(kv, i, q, k, v, 1.0 / math.sqrt(d), c.window_of(i),
                          sinks=block.attn_sinks)                            # (T, H*D)
            if i == self._cut_layer:
                a, x = inputs.output_rows(a, x)                              # (n_out, ...)
            x = x.add(block.attn_output.mul_mat(a).add(block.attn_output_bias))
            h = x.rms_norm(c.norm_eps).mul(block.post_attention_norm)
            x = x.add(self._experts(block, h))
        x = x.rms_norm(c.norm_eps).mul(self.output_norm)                     # (n_out, E)
        return self.project(x, inputs)                                       # (n_out, vocab)

    def _experts(self, block: GptOssBlock, h):
        """h (T, E) -> (T, E): the chosen experts' clamped SwiGLUs, weighted."""
        n, embd = h.shape
        logits = block.ffn_gate_inp.mul_mat(h).add(block.ffn_gate_inp_bias)  # (T, X)
        routing = self.config.routing
        assert routing is not None                                # from_metadata sets it
        chosen, weights = route(routing, logits)                            # (T, K), (T, K, 1)
        routed = h.reshape(n, 1, embd)
        gate = block.ffn_gate_exps.mul_mat_id(routed, chosen).add_id(
            block.ffn_gate_exps_bias, chosen)                                # (T, K, F)
        up = block.ffn_up_exps.mul_mat_id(routed, chosen).add_id(block.ffn_up_exps_bias, chosen)
        out = block.ffn_down_exps.mul_mat_id(gate.swiglu_oai(up, SWIGLU_ALPHA, SWIGLU_LIMIT),
                                             chosen).add_id(block.ffn_down_exps_bias, chosen)
        return weighted_sum(out, weights)                                    # (T, E)

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys k (cells, KVH, D) by position deltas (cells,)."""
        return self.config.rope.shift(k, deltas, self.rope_mode)


register("gptoss")(GptOss)           # Ollama's files' name for it
