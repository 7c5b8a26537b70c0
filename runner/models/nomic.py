"""Nomic BERT (nomic-embed-text): BERT's post-LayerNorm encoder with rotary positions (NEOX,
no position embeddings), one fused QKV projection and a SwiGLU feed-forward, no biases in
the released models. Embeddings only, pooled as the file says (mean for nomic-embed-text).

Its mixture-of-experts variant (nomic-bert-moe: nomic-embed-text-v2-moe, with XLM-RoBERTa's
Unigram tokenizer) has biases, a GELU feed-forward, and every moe_every_n_layers-th layer
(the odd ones) a router choosing experts (softmax, top k, weights not renormalised), each a
GELU MLP, as llama.cpp's build_moe_ffn runs them."""

from __future__ import annotations

from dataclasses import dataclass

from .contract import register
from .base import Metadata
from .bert import Bert, BertBlock, BertConfig
from .experts import Routing, route, weighted_sum
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
    config: NomicBertConfig
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


@dataclass
class NomicBertMoeConfig(NomicBertConfig):
    routing: Routing | None = None
    moe_every: int = 2                      # layers i with i % moe_every == 1 have experts

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "nomic-bert-moe") -> NomicBertMoeConfig:
        base, m = NomicBertConfig.from_metadata(meta, arch), Metadata(meta, arch)
        experts, used = m.experts(required=True)
        return cls(**vars(base), moe_every=int(m.require("{arch}.moe_every_n_layers")),
                   routing=Routing(experts, used, normalize=False))


@dataclass
class NomicBertMoeBlock(NomicBertBlock):
    ffn_gate_inp: object = None             # (X, E): the router
    ffn_up_exps: object = None              # (X, F, E)
    ffn_down_exps: object = None            # (X, E, F)


@register("nomic-bert-moe")
class NomicBertMoe(NomicBert):
    config_class = NomicBertMoeConfig
    config: NomicBertMoeConfig
    block_class = NomicBertMoeBlock

    def _bind_block(self, weights, i: int) -> NomicBertMoeBlock:
        c = self.config
        assert c.routing is not None                              # from_metadata sets it
        e, f, x = c.embd, c.ffn, c.routing.experts
        if i % c.moe_every != 1:
            shapes = {"attn_qkv": (3 * e, e), "attn_output": (e, e), "ffn_up": (f, e),
                      "ffn_down": (e, f)}
            return NomicBertMoeBlock(**self._linears(weights, i, shapes),
                                     **self._norms(weights, i))
        shapes = {"attn_qkv": (3 * e, e), "attn_output": (e, e)}
        return NomicBertMoeBlock(
            **self._linears(weights, i, shapes), **self._norms(weights, i),
            ffn_gate_inp=weights.take(f"blk.{i}.ffn_gate_inp.weight", (x, e)),
            ffn_up_exps=weights.take(f"blk.{i}.ffn_up_exps.weight", (x, f, e)),
            ffn_down_exps=weights.take(f"blk.{i}.ffn_down_exps.weight", (x, e, f)))

    def _ffn(self, block, x):
        """x (T, E) -> (T, E): GELU, or the chosen experts' GELU MLPs by their weights."""
        if block.ffn_gate_inp is None:
            return Bert._ffn(self, block, x)
        n, embd = x.shape
        chosen, weights = route(self.config.routing, block.ffn_gate_inp.mul_mat(x))
        routed = x.reshape(n, 1, embd)                                       # (T, 1, E)
        up = block.ffn_up_exps.mul_mat_id(routed, chosen)                    # (T, K, F)
        out = block.ffn_down_exps.mul_mat_id(up.gelu(), chosen)              # (T, K, E)
        return weighted_sum(out, weights)
