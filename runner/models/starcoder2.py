"""StarCoder2, as llama.cpp's starcoder2 runs it: LayerNorms with a weight and a bias, Q, K
and V with optional biases (or one attn_qkv), the output projection's bias, NEOX rope over
the whole head, and an FFN of one projection up, GELU (tanh form) and one down, each with
its bias.

The sliding window transformers applies (4096 positions in the released configs) is not:
llama.cpp's starcoder2 attends to the whole context, and so does this model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .attention import attention
from .base import ATTENTION, LLM, ROPE, Metadata, Transformer, Weights, weight
from .contract import register
from .fused import AttentionBlock, bind_attention, qkv
from .llama import LlamaConfig

if TYPE_CHECKING:
    from pyggml import Tensor


@dataclass
class Starcoder2Block(AttentionBlock):
    attn_norm_bias: Tensor = weight()
    attn_output_bias: Tensor = weight()
    ffn_norm: Tensor = weight()
    ffn_norm_bias: Tensor = weight()
    ffn_up: Tensor = weight()
    ffn_up_bias: Tensor = weight()
    ffn_down: Tensor = weight()
    ffn_down_bias: Tensor = weight()


@dataclass
class Starcoder2Config(LlamaConfig):
    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "starcoder2") -> Starcoder2Config:
        m = Metadata(meta, arch)
        base = LlamaConfig.from_metadata(meta, arch)
        return cls(**{**vars(base), "norm_eps": float(m.require(ATTENTION.LAYERNORM_EPS))})

    def check(self, m: Metadata) -> None:
        """llama.cpp sizes Q and the output projection by embedding_length, and rotates
        whole heads."""
        super().check(m)
        if self.heads * self.head_dim != self.embd:
            raise m.malformed(ATTENTION.HEAD_COUNT, self.heads, f"whose heads of "
                              f"{self.head_dim} do not make up {m.name(LLM.EMBEDDING_LENGTH)} "
                              f"({self.embd}), as starcoder2's projections need")
        if self.rope.dims != self.head_dim:
            raise m.malformed(ROPE.DIMENSION_COUNT, self.rope.dims, "not the whole head "
                              f"({self.head_dim}), which starcoder2 rotates")


# each bias a block needs (llama.cpp's starcoder2 requires them): its name and width
BIASES = {"attn_norm": "embd", "attn_output": "embd", "ffn_norm": "embd", "ffn_up": "ffn",
          "ffn_down": "embd"}


@register("starcoder2")
class Starcoder2(Transformer):
    attends_in_streams = True
    config_class = Starcoder2Config
    config: Starcoder2Config
    rope_mode = "neox"

    @classmethod
    def config_of(cls, meta: dict):
        return Starcoder2Config.from_metadata(meta, meta["general.architecture"])

    def __init__(self, config: Starcoder2Config, weights: Weights):
        c = self.config = config
        self.bind_ends(weights)
        self.output_norm_bias = weights.take("output_norm.bias", (c.embd,))
        self.blocks = []
        for i in range(c.layers):
            prefix = f"blk.{i}."
            block = bind_attention(Starcoder2Block(), weights, prefix, c, {
                "ffn_norm": (c.embd,), "ffn_up": (c.ffn, c.embd), "ffn_down": (c.embd, c.ffn)})
            for name, width in BIASES.items():
                setattr(block, f"{name}_bias",
                        weights.take(f"{prefix}{name}.bias", (getattr(c, width),)))
            self.blocks.append(block)

    def forward(self, inputs, kv):
        c, eps = self.config, self.config.norm_eps
        x = inputs.splice(self.token_embd.get_rows(inputs.tokens))           # (T, E)
        for i, block in enumerate(self.blocks):
            h = x.norm(eps).mul(block.attn_norm).add(block.attn_norm_bias)
            q, k, v = qkv(block, h, c)                                       # (T, H|KVH, D)
            q = c.rope.apply(q, inputs.positions, self.rope_mode)
            k = c.rope.apply(k, inputs.positions, self.rope_mode)
            a = attention(kv, i, q, k, v, c.kq_scale)                       # (T, H*D)
            if i == self._cut_layer:
                a, x = inputs.output_rows(a, x)                              # (n_out, ...)
            x = block.attn_output.mul_mat(a).add(block.attn_output_bias).add(x)
            h = x.norm(eps).mul(block.ffn_norm).add(block.ffn_norm_bias)
            up = block.ffn_up.mul_mat(h).add(block.ffn_up_bias)             # (T, F)
            x = block.ffn_down.mul_mat(up.gelu()).add(block.ffn_down_bias).add(x)
        x = x.norm(eps).mul(self.output_norm).add(self.output_norm_bias)    # (n_out, E)
        return self.project(x, inputs)                                       # (n_out, vocab)

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys k (cells, KVH, D) by position deltas (cells,)."""
        return self.config.rope.shift(k, deltas, self.rope_mode)
