"""OLMo 2: norms after each sublayer instead of before it (the attention's and the FFN's
outputs are RMS-normed, then added to the residual), Q and K RMS-normed over all heads at
once (before the split into heads), NEOX rope, SwiGLU. OLMo 3 is the same file architecture
with a sliding window (llama.cpp's olmo2 with a window) on the layers
attention.sliding_window_pattern names (three of every four where the file does not say);
a file's rope scaling (YaRN) is the global layers', the sliding ones rotate unscaled.

Ollama's converter wrote OLMo 3 as architecture olmo3, olmo2's keys under that name (its
YaRN attn_factor as transformers' attention_factor, which llama.cpp, reading those files
through Ollama's compatibility layer, multiplies onto YaRN's own as it does olmo2's): read
alike."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .contract import register
from .attention import attention
from .base import ATTENTION, Block, Metadata, Transformer, Weights, weight
from .llama import LlamaConfig
from .rope import RopeConfig

SLIDING_PATTERN = 4          # with a window and no pattern, layers i % 4 == 3 are global

if TYPE_CHECKING:
    from pyggml import Tensor


@dataclass
class Olmo2Block(Block):
    attn_q: Tensor = weight()
    attn_k: Tensor = weight()
    attn_v: Tensor = weight()
    attn_q_norm: Tensor = weight()      # over all heads (H * D)
    attn_k_norm: Tensor = weight()      # (KVH * D)
    attn_output: Tensor = weight()
    post_attention_norm: Tensor = weight()
    ffn_gate: Tensor = weight()
    ffn_up: Tensor = weight()
    ffn_down: Tensor = weight()
    post_ffw_norm: Tensor = weight()


@dataclass
class Olmo2Config(LlamaConfig):
    window: int | None = None            # OLMo 3's sliding layers'
    sliding: tuple[bool, ...] = ()       # which layers slide (with a window)
    rope_local: RopeConfig | None = None  # theirs: the rope without its scaling

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "olmo2") -> Olmo2Config:
        m = Metadata(meta, arch)
        window = m.get(ATTENTION.SLIDING_WINDOW)
        base = LlamaConfig.from_metadata(meta, arch)
        return cls(**vars(base), window=int(window) if window else None,
                   sliding=m.sliding_layers(base.layers, SLIDING_PATTERN) if window else (),
                   rope_local=replace(base.rope, freq_scale=1.0, ext_factor=0.0,
                                      attn_factor=1.0))

    def window_of(self, layer: int) -> int | None:
        return self.window if self.sliding and self.sliding[layer] else None

    def rope_of(self, layer: int) -> RopeConfig:
        if not self.window_of(layer):
            return self.rope
        assert self.rope_local is not None                       # from_metadata sets it
        return self.rope_local


@register("olmo3")                  # Ollama's files' name for OLMo 3
@register("olmo2")
class Olmo2(Transformer):
    attends_in_streams = True
    config_class = Olmo2Config
    config: Olmo2Config
    rope_mode = "neox"

    @classmethod
    def config_of(cls, meta: dict):
        return cls.config_class.from_metadata(meta, meta["general.architecture"])

    def windows(self) -> tuple:
        return (None,) if self.config.window is None else (None, self.config.window)

    def __init__(self, config: Olmo2Config, weights: Weights):
        c = self.config = config
        q_dim, kv_dim = c.heads * c.head_dim, c.kv_heads * c.head_dim
        self.bind_ends(weights)
        self.blocks = []
        for i in range(c.layers):
            block = Olmo2Block()
            weights.bind(block, f"blk.{i}.", {
                "attn_q": (q_dim, c.embd), "attn_k": (kv_dim, c.embd),
                "attn_v": (kv_dim, c.embd), "attn_q_norm": (q_dim,),
                "attn_k_norm": (kv_dim,), "attn_output": (c.embd, q_dim),
                "post_attention_norm": (c.embd,), "ffn_gate": (c.ffn, c.embd),
                "ffn_up": (c.ffn, c.embd), "ffn_down": (c.embd, c.ffn),
                "post_ffw_norm": (c.embd,)})
            self.blocks.append(block)

    def forward(self, inputs, kv):
        c = self.config
        n, eps, d = inputs.n_tokens, c.norm_eps, c.head_dim
        x = inputs.splice(self.token_embd.get_rows(inputs.tokens))           # (T, E)
        for i, block in enumerate(self.blocks):
            q = block.attn_q.mul_mat(x).rms_norm(eps).mul(block.attn_q_norm)  # (T, H*D)
            k = block.attn_k.mul_mat(x).rms_norm(eps).mul(block.attn_k_norm)  # (T, KVH*D)
            v = block.attn_v.mul_mat(x).reshape(n, c.kv_heads, d)
            rope = c.rope_of(i)
            q = rope.apply(q.reshape(n, c.heads, d), inputs.positions, self.rope_mode)
            k = rope.apply(k.reshape(n, c.kv_heads, d), inputs.positions, self.rope_mode)
            a = attention(kv, i, q, k, v, 1.0 / math.sqrt(d), c.window_of(i))  # (T, H*D)
            if i == self._cut_layer:
                a, x = inputs.output_rows(a, x)                              # (n_out, ...)
            x = x.add(block.attn_output.mul_mat(a).rms_norm(eps).mul(block.post_attention_norm))
            gated = block.ffn_gate.mul_mat(x).swiglu(block.ffn_up.mul_mat(x))   # (T, F)
            x = x.add(block.ffn_down.mul_mat(gated).rms_norm(eps).mul(block.post_ffw_norm))
        x = x.rms_norm(eps).mul(self.output_norm)                            # (n_out, E)
        return self.project(x, inputs)                                       # (n_out, vocab)

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys k (cells, KVH, D) by position deltas (cells,)."""
        return self.config.rope_of(layer).shift(k, deltas, self.rope_mode)
