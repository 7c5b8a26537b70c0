"""BERT, an encoder: learned position and token-type embeddings, post-LayerNorm blocks with
biases, exact (erf) GELU, attention over the whole sequence (not causal). It makes final
hidden states for pooled embeddings; it has no language-model head."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .contract import register
from .attention import attention
from .base import ATTENTION, LLM, Block, Metadata, ModelError, Transformer, TransformerConfig


@dataclass
class BertConfig(TransformerConfig):
    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "bert") -> "BertConfig":
        m = Metadata(meta, arch)
        embd, heads = int(m.require(LLM.EMBEDDING_LENGTH)), int(m.require(ATTENTION.HEAD_COUNT))
        return cls(layers=int(m.require(LLM.BLOCK_COUNT)), embd=embd,
                   ffn=int(m.require(LLM.FEED_FORWARD_LENGTH)), heads=heads, kv_heads=heads,
                   head_dim=embd // heads, vocab=m.token_count(),
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
    config: BertConfig
    block_class = BertBlock
    causal = False

    @classmethod
    def config_of(cls, meta: dict):
        return cls.config_class.from_metadata(meta, meta["general.architecture"])

    def __init__(self, config: BertConfig, weights):
        c = self.config = config
        self._bind_embeddings(weights)
        self.blocks = [self._bind_block(weights, i) for i in range(c.layers)]

    def _bind_embeddings(self, weights) -> None:
        c = self.config
        self.token_embd = weights.take("token_embd.weight", (c.vocab, c.embd))
        self.position_embd = weights.take("position_embd.weight", (c.context, c.embd))
        self.token_types = weights.optional("token_types.weight")
        self.embd_norm = self._norm(weights, "token_embd_norm", c.embd)

    def _bind_block(self, weights, i: int) -> BertBlock:
        c = self.config
        e, f = c.embd, c.ffn
        shapes = {"attn_q": (e, e), "attn_k": (e, e), "attn_v": (e, e),
                  "attn_output": (e, e), "ffn_up": (f, e), "ffn_down": (e, f)}
        return self.block_class(**self._linears(weights, i, shapes), **self._norms(weights, i))

    def _norms(self, weights, i: int) -> dict:
        """Block i's two LayerNorms (after the attention, after the FFN)."""
        return {name: self._norm(weights, f"blk.{i}.{name}", self.config.embd)
                for name in ("attn_output_norm", "layer_output_norm")}

    @staticmethod
    def _linears(weights, i: int, shapes: dict) -> dict:
        """Each named linear of block i as (weight, bias or None)."""
        return {name: (weights.take(f"blk.{i}.{name}.weight", shape),
                       weights.optional(f"blk.{i}.{name}.bias", shape[:1]))
                for name, shape in shapes.items()}

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
            raise ModelError(f"{type(self).__name__} makes embeddings only; it has no "
                             "language-model head.")
        c = self.config
        x = self.token_embd.get_rows(inputs.tokens)                          # (T, E)
        if self.token_types is not None:                                     # all type 0
            x = x.add(x.context.bind(self.token_types).view((c.embd,)))
        x = self._positioned(x, inputs)
        x = self._layer_norm(x, self.embd_norm)
        for i, block in enumerate(self.blocks):
            q, k, v = self._qkv(block, x, inputs)                            # (T, H, D)
            a = attention(kv, i, q, k, v, 1.0 / math.sqrt(c.head_dim))       # (T, H*D)
            x = self._layer_norm(x.add(self._linear(a, block.attn_output)),
                                 block.attn_output_norm)
            x = self._layer_norm(x.add(self._ffn(block, x)), block.layer_output_norm)
        return x.get_rows(inputs.outputs)                                    # (n_out, E)

    def _positioned(self, x, inputs):
        """x (T, E) with the learned position embeddings added (llama.cpp's order)."""
        return x.add(self.position_embd.get_rows(inputs.positions))

    def _qkv(self, block, x, inputs):
        """x (T, E) -> queries, keys and values (T, H, D)."""
        c, n = self.config, inputs.n_tokens
        return tuple(self._linear(x, part).reshape(n, c.heads, c.head_dim)
                     for part in (block.attn_q, block.attn_k, block.attn_v))

    def _ffn(self, block, x):
        """x (T, E) -> (T, E): GELU."""
        return self._linear(self._linear(x, block.ffn_up).gelu(), block.ffn_down)

    def shift(self, k, deltas, layer: int):
        raise ModelError(f"{type(self).__name__} encodes each input whole; its cache does not "
                         "shift.")
