"""BERT, an encoder: learned position and token-type embeddings, post-LayerNorm blocks with
biases, exact (erf) GELU, attention over the whole sequence (not causal). It makes final
hidden states for pooled embeddings; it has no language-model head."""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import register
from .attention import attention
from .base import ATTENTION, LLM, Block, Metadata, ModelError, Transformer, TransformerConfig


@dataclass
class BertConfig(TransformerConfig):
    @classmethod
    def from_metadata(cls, meta: dict) -> "BertConfig":
        m = Metadata(meta, "bert")
        embd, heads = int(m.require(LLM.EMBEDDING_LENGTH)), int(m.require(ATTENTION.HEAD_COUNT))
        return cls(layers=int(m.require(LLM.BLOCK_COUNT)), embd=embd,
                   ffn=int(m.require(LLM.FEED_FORWARD_LENGTH)), heads=heads, kv_heads=heads,
                   head_dim=embd // heads, vocab=len(meta["tokenizer.ggml.tokens"]),
                   context=int(m.get(LLM.CONTEXT_LENGTH, 512)),
                   norm_eps=float(m.get(ATTENTION.LAYERNORM_EPS, 1e-12)))


@dataclass
class BertBlock(Block):
    """Each linear and norm as (weight, bias), the bias None where the file has none."""
    attn_q: tuple | None = None
    attn_k: tuple | None = None
    attn_v: tuple | None = None
    attn_output: tuple | None = None
    attn_output_norm: tuple | None = None
    ffn_up: tuple | None = None
    ffn_down: tuple | None = None
    layer_output_norm: tuple | None = None


@register("bert")
class Bert(Transformer):
    config_class = BertConfig
    causal = False

    def __init__(self, config: BertConfig, weights):
        c = self.config = config
        self.token_embd = weights.take("token_embd.weight", (c.vocab, c.embd))
        self.position_embd = weights.take("position_embd.weight", (c.context, c.embd))
        self.token_types = weights.optional("token_types.weight")
        self.embd_norm = self._norm(weights, "token_embd_norm", c.embd)
        self.blocks = []
        for i in range(c.layers):
            e, f = c.embd, c.ffn
            shapes = {"attn_q": (e, e), "attn_k": (e, e), "attn_v": (e, e),
                      "attn_output": (e, e), "ffn_up": (f, e), "ffn_down": (e, f)}
            linears = {name: (weights.take(f"blk.{i}.{name}.weight", shape),
                              weights.optional(f"blk.{i}.{name}.bias", shape[:1]))
                       for name, shape in shapes.items()}
            self.blocks.append(BertBlock(
                **linears,
                attn_output_norm=self._norm(weights, f"blk.{i}.attn_output_norm", e),
                layer_output_norm=self._norm(weights, f"blk.{i}.layer_output_norm", e)))

    @staticmethod
    def _norm(weights, name: str, dim: int):
        return (weights.take(f"{name}.weight", (dim,)), weights.take(f"{name}.bias", (dim,)))

    def _layer_norm(self, x, norm):
        weight, bias = norm
        return x.norm(self.config.norm_eps).mul(weight).add(bias)

    @staticmethod
    def _linear(x, layer):
        weight, bias = layer
        y = weight.mul_mat(x)
        return y if bias is None else y.add(bias)

    def forward(self, inputs, kv):
        if not inputs.embeddings:
            raise ModelError("BERT makes embeddings only; it has no language-model head.")
        c, n = self.config, inputs.n_tokens
        x = self.token_embd.get_rows(inputs.tokens)                          # (T, E)
        if self.token_types is not None:                                     # all type 0
            x = x.add(x.context.bind(self.token_types).view((c.embd,)))
        x = x.add(self.position_embd.get_rows(inputs.positions))      # llama.cpp's order
        x = self._layer_norm(x, self.embd_norm)
        d = c.head_dim
        for i, block in enumerate(self.blocks):
            q = self._linear(x, block.attn_q).reshape(n, c.heads, d)           # (T, H, D)
            k = self._linear(x, block.attn_k).reshape(n, c.heads, d)
            v = self._linear(x, block.attn_v).reshape(n, c.heads, d)
            a = attention(kv, i, q, k, v, 1.0 / math.sqrt(d))                 # (T, H*D)
            x = self._layer_norm(x.add(self._linear(a, block.attn_output)),
                                 block.attn_output_norm)
            f = self._linear(self._linear(x, block.ffn_up).gelu(), block.ffn_down)
            x = self._layer_norm(x.add(f), block.layer_output_norm)
        return x.get_rows(inputs.outputs)                                    # (n_out, E)

    def shift(self, k, deltas, layer: int):
        raise ModelError("BERT's positions are learned embeddings; its cache cannot shift.")
