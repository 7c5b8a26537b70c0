"""Command R and R+ (command-r), Command R7B and Command A (cohere2), as llama.cpp runs them: a
parallel block (the attention and the FFN both read one LayerNorm of the residual, and the
block's output is residual + FFN + attention, summed in that order), LayerNorms that
subtract the mean and have a weight but no bias, Q, K and V with optional biases (or one
attn_qkv), SwiGLU, rope over interleaved pairs (transformers' Cohere rotates pairs, so the
converter permutes nothing), the output projection tied to the token embeddings (llama.cpp
reads no output.weight), the logits times logit_scale (command-r: where the file gives one
other than 0).

Command R+ normalises each head's queries and keys (attn_q_norm, attn_k_norm: a LayerNorm
weight per head) before the rope, where the file holds those norms (llama.cpp reads them
from files of 64 layers or more, which the released ones are).

cohere2: the layers attention.sliding_window_pattern names (one bool per layer, or every
n-th layer global with a number, 4 by default: layers 3, 7, 11, ...) attend within
attention.sliding_window positions and rotate; the global layers attend to everything and
have no rope, so a context shift leaves their keys as they are (llama.cpp's re-rotates
them). rope.freq_base_swa is read by llama.cpp and not used: the sliding layers rotate by
rope.freq_base, as here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .attention import attention
from .base import ATTENTION, LLM, Metadata, Transformer, Weights, weight
from .contract import register
from .fused import AttentionBlock, bind_attention, qkv
from .llama import LlamaConfig, scaled

if TYPE_CHECKING:
    from pyggml import Tensor

SLIDING_PATTERN = 4         # cohere2's default: layer i global when i % 4 == 3


@dataclass
class CommandRBlock(AttentionBlock):
    attn_q_norm: Tensor | None = None       # (H, D): Command R+'s, a weight per head
    attn_k_norm: Tensor | None = None       # (KVH, D)
    ffn_gate: Tensor = weight()
    ffn_up: Tensor = weight()
    ffn_down: Tensor = weight()


@dataclass
class CommandRConfig(LlamaConfig):
    logit_scale: float = 0.0                # the logits' multiplier; 0: none
    window: int | None = None               # cohere2's sliding layers' window
    sliding: tuple[bool, ...] = ()          # which layers slide (cohere2)

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "command-r") -> CommandRConfig:
        m = Metadata(meta, arch)
        base = LlamaConfig.from_metadata(meta, arch)
        return cls(**{**vars(base), "norm_eps": float(m.require(ATTENTION.LAYERNORM_EPS)),
                      "logit_scale": float(m.get(LLM.LOGIT_SCALE, 0.0))})

    def check(self, m: Metadata) -> None:
        """llama.cpp sizes Q and the output projection by embedding_length."""
        super().check(m)
        if self.heads * self.head_dim != self.embd:
            raise m.malformed(ATTENTION.HEAD_COUNT, self.heads, f"whose heads of "
                              f"{self.head_dim} do not make up {m.name(LLM.EMBEDDING_LENGTH)} "
                              f"({self.embd}), as {m.arch}'s projections need")

    def window_of(self, layer: int) -> int | None:
        return self.window if self.sliding and self.sliding[layer] else None


@dataclass
class Cohere2Config(CommandRConfig):
    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "cohere2") -> Cohere2Config:
        m = Metadata(meta, arch)
        base = CommandRConfig.from_metadata(meta, arch)
        window = int(m.require(ATTENTION.SLIDING_WINDOW))
        if window < 1:
            raise m.malformed(ATTENTION.SLIDING_WINDOW, window, "but a sliding layer must "
                              "see at least its own position")
        sliding = m.sliding_layers(base.layers, SLIDING_PATTERN)
        return cls(**{**vars(base), "logit_scale": float(m.require(LLM.LOGIT_SCALE)),
                      "window": window, "sliding": sliding, "rope_layers": sliding})


@register("command-r")
class CommandR(Transformer):
    attends_in_streams = True
    config_class = CommandRConfig
    config: CommandRConfig
    rope_mode = "normal"

    @classmethod
    def config_of(cls, meta: dict):
        return cls.config_class.from_metadata(meta, meta["general.architecture"])

    def __init__(self, config: CommandRConfig, weights: Weights):
        c = self.config = config
        self.bind_ends(weights)
        self.output = self.token_embd                   # llama.cpp reads no output.weight
        self.blocks = []
        for i in range(c.layers):
            prefix = f"blk.{i}."
            block = bind_attention(CommandRBlock(), weights, prefix, c, {
                "ffn_gate": (c.ffn, c.embd), "ffn_up": (c.ffn, c.embd),
                "ffn_down": (c.embd, c.ffn)})
            block.attn_q_norm = weights.optional(f"{prefix}attn_q_norm.weight",
                                                 (c.heads, c.head_dim))
            block.attn_k_norm = weights.optional(f"{prefix}attn_k_norm.weight",
                                                 (c.kv_heads, c.head_dim))
            self.blocks.append(block)

    def windows(self) -> tuple:
        return (None, self.config.window) if self.config.window else (None,)

    def forward(self, inputs, kv):
        c, eps = self.config, self.config.norm_eps
        x = inputs.splice(self.token_embd.get_rows(inputs.tokens))           # (T, E)
        if not any(c.uses_rope(i) for i in range(c.layers)):
            inputs.first.append(inputs.positions)    # read by no layer: the engine fills them
        for i, block in enumerate(self.blocks):
            h = x.norm(eps).mul(block.attn_norm)             # (T, E): both sublayers' input
            q, k, v = qkv(block, h, c)                                       # (T, H|KVH, D)
            if block.attn_q_norm is not None:
                q = q.norm(eps).mul(block.attn_q_norm)
            if block.attn_k_norm is not None:
                k = k.norm(eps).mul(block.attn_k_norm)
            if c.uses_rope(i):
                q = c.rope.apply(q, inputs.positions, self.rope_mode)
                k = c.rope.apply(k, inputs.positions, self.rope_mode)
            a = attention(kv, i, q, k, v, c.kq_scale, c.window_of(i))       # (T, H*D)
            if i == self._cut_layer:
                a, x, h = inputs.output_rows(a, x, h)                        # (n_out, ...)
            gated = block.ffn_gate.mul_mat(h).swiglu(block.ffn_up.mul_mat(h))  # (T, F)
            f = block.ffn_down.mul_mat(gated)                                # (T, E)
            x = f.add(x).add(block.attn_output.mul_mat(a))
        x = x.norm(eps).mul(self.output_norm)                                # (n_out, E)
        return self.project(x, inputs)                                       # (n_out, vocab)

    def project(self, x, inputs):
        """Logits (n_out, vocab) times logit_scale, where it is not 0."""
        logits = super().project(x, inputs)
        scale = self.config.logit_scale
        return logits if inputs.embeddings or not scale else scaled(logits, scale)

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys k (cells, KVH, D) by position deltas (cells,); a layer
        without rope keeps its keys."""
        if not self.config.uses_rope(layer):
            return None
        return self.config.rope.shift(k, deltas, self.rope_mode)


@register("cohere2")
class Cohere2(CommandR):
    config_class = Cohere2Config
    config: Cohere2Config

