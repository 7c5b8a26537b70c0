"""Nomic BERT (nomic-embed-text): BERT's post-LayerNorm encoder with rotary positions (NEOX,
no position embeddings), one fused QKV projection and a SwiGLU feed-forward, no biases in
the released models. Embeddings only, pooled as the file says (mean for nomic-embed-text).

The mixture-of-experts variant (nomic-bert-moe, nomic-embed-text-v2-moe) is not read: its
tokenizer is XLM-RoBERTa's Unigram model, which the runner's tokenizers do not include."""

from __future__ import annotations

from dataclasses import dataclass

from . import register
from .base import Metadata
from .bert import Bert, BertBlock, BertConfig
from .rope import RopeConfig


@dataclass
class NomicBertConfig(BertConfig):
    rope: RopeConfig | None = None

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "nomic-bert") -> NomicBertConfig:
        base = BertConfig.from_metadata(meta, arch)
        return cls(**vars(base), rope=RopeConfig.from_metadata(Metadata(meta, arch),
                                                              base.head_dim, 10000.0))


@dataclass
class NomicBertBlock(BertBlock):
    attn_qkv: tuple | None = None           # (3E, E) and its bias, as (weight, bias)
    ffn_gate: tuple | None = None


@register("nomic-bert")
class NomicBert(Bert):
    config_class = NomicBertConfig
    block_class = NomicBertBlock

    def _bind_embeddings(self, weights) -> None:
        c = self.config
        self.token_embd = weights.take("token_embd.weight", (c.vocab, c.embd))
        self.token_types = weights.optional("token_types.weight")
        self.embd_norm = self._norm(weights, "token_embd_norm", c.embd)

    def _bind_block(self, weights, i: int) -> NomicBertBlock:
        e, f = self.config.embd, self.config.ffn
        shapes = {"attn_qkv": (3 * e, e), "attn_output": (e, e), "ffn_up": (f, e),
                  "ffn_gate": (f, e), "ffn_down": (e, f)}
        return NomicBertBlock(**self._linears(weights, i, shapes), **self._norms(weights, i))

    def _positioned(self, x, inputs):
        return x                                  # rotary: positions enter the attention

    def _qkv(self, block, x, inputs):
        c, n = self.config, inputs.n_tokens
        qkv = self._linear(x, block.attn_qkv)                                # (T, 3E)
        stride = (qkv.strides[0], c.head_dim * qkv.strides[1], qkv.strides[1])
        q, k, v = (qkv.view((n, c.heads, c.head_dim), part * c.embd * qkv.strides[1], stride)
                   for part in range(3))                                     # (T, H, D)
        return (c.rope.apply(q, inputs.positions, "neox"),
                c.rope.apply(k, inputs.positions, "neox"), v.cont())

    def _ffn(self, block, x):
        """x (T, E) -> (T, E): SwiGLU."""
        gated = self._linear(x, block.ffn_gate).swiglu(self._linear(x, block.ffn_up))
        return self._linear(gated, block.ffn_down)
