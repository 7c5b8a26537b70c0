"""GLM-4 (9B) and GLM-4-0414, as llama.cpp's glm4 runs them: a norm before and after each
sublayer (the attention's output RMS-normed by post_attention_norm before the residual adds
it, the FFN's input by ffn_norm and its output by post_ffw_norm), Q/K/V biases, the FFN's
gate and up in one product (fused.py), rope over the first rope.dimension_count dimensions
of each head (half of it) in interleaved pairs (transformers' GLM rotates pairs, so the
converter permutes nothing), the output projection and the FFN's down projection summed in
float32 on every device, as llama.cpp asks.

A file with M-RoPE sections (GLM-4V's text model, which llama.cpp's converter permutes to
NEOX order) rotates by rope_multi, a text token's axes all its position. The NextN layers
a file may hold past its layers (nextn_predict_layers, GLM-OCR's) are not run, as in
llama.cpp."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .attention import attention
from .base import ATTENTION, Metadata, Transformer, Weights, weight
from .contract import register
from .fused import FusedBlock, bind_fused, gated_ffn, qkv
from .llama import LlamaConfig

if TYPE_CHECKING:
    from pyggml import Tensor


@dataclass
class Glm4Block(FusedBlock):
    post_attention_norm: Tensor = weight()      # transformers' post_self_attn_layernorm
    post_ffw_norm: Tensor = weight()            # its post_mlp_layernorm


@dataclass
class Glm4Config(LlamaConfig):
    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "glm4") -> Glm4Config:
        m = Metadata(meta, arch)
        m.require(ATTENTION.LAYERNORM_RMS_EPS)                          # llama.cpp's too
        base = LlamaConfig.from_metadata(meta, arch)
        return cls(**{**vars(base), "layers": m.layers_run()})


@register("glm4")
class Glm4(Transformer):
    attends_in_streams = True
    config_class = Glm4Config
    config: Glm4Config

    @classmethod
    def config_of(cls, meta: dict):
        return Glm4Config.from_metadata(meta, meta["general.architecture"])

    def __init__(self, config: Glm4Config, weights: Weights):
        c = self.config = config
        # pairs interleaved; NEOX's halves where the converter permuted them for M-RoPE
        self.rope_mode = "neox" if c.rope.sections else "normal"
        self.bind_ends(weights)
        norms = {"post_attention_norm": (c.embd,), "post_ffw_norm": (c.embd,)}
        self.blocks = [bind_fused(Glm4Block(), weights, f"blk.{i}.", c, norms)
                       for i in range(c.layers)]

    def position_axes(self) -> int:
        return self.config.rope.axes

    def forward(self, inputs, kv):
        c, eps = self.config, self.config.norm_eps
        x = inputs.splice(self.token_embd.get_rows(inputs.tokens))           # (T, E)
        for i, block in enumerate(self.blocks):
            h = x.rms_norm(eps).mul(block.attn_norm)
            q, k, v = qkv(block, h, c)                                       # (T, H|KVH, D)
            q = c.rope.apply(q, inputs.positions, self.rope_mode)
            k = c.rope.apply(k, inputs.positions, self.rope_mode)
            a = attention(kv, i, q, k, v, 1.0 / math.sqrt(c.head_dim))      # (T, H*D)
            if i == self._cut_layer:
                a, x = inputs.output_rows(a, x)                              # (n_out, ...)
            a = block.attn_output.mul_mat(a).accumulate_in_f32()             # (T, E)
            x = x.add(a.rms_norm(eps).mul(block.post_attention_norm))
            h = x.rms_norm(eps).mul(block.ffn_norm)
            f = gated_ffn(block, h, f32_down=True)
            x = x.add(f.rms_norm(eps).mul(block.post_ffw_norm))
        x = x.rms_norm(eps).mul(self.output_norm)                            # (n_out, E)
        return self.project(x, inputs)                                       # (n_out, vocab)

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys k (cells, KVH, D) by position deltas (cells,): a text
        token's M-RoPE axes all move alike, which NEOX's rope does."""
        return self.config.rope.shift(k, deltas, self.rope_mode)
