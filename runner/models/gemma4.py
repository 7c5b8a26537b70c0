"""Gemma 4 (text).

Like Gemma 3: scaled embeddings, Q/K norms, norms after attention and after the FFN, a
GELU-gated FFN, sliding-window layers with their own rope base. New in Gemma 4:
- sliding and full layers have their own head size and KV head count; attention is
  unscaled (the Q/K norms set the scale) and V is RMS-normed without a weight;
- full layers may have no V projection: V is K's projection (before its norm and rope);
- their RoPE is "proportional": rope_freqs stops the frequencies past the rotated part;
- the last shared_kv_layers layers keep no cache: each reads the cache of the last earlier
  layer of its kind, which llama.cpp calls KV sharing;
- per-layer embeddings: a token's per-layer vector (its own embedding table) and a
  projection of its embedding, gating a small residual branch in each layer;
- optionally a mixture of experts beside the dense FFN: a router on the RMS-normed
  residual (softmax, top-k renormalised, scaled per expert), experts with a fused
  gate_up projection whose halves are the gate and the up projection;
- each layer's output is scaled by layer_output_scale, and the logits are soft-capped.

With images: their rows replace the scaled embeddings (the per-layer inputs project those
too, and take the pad token's own per-layer embedding: a media row's token is 0, the pad,
as in the reference). When the checkpoint said use_bidirectional_attention "vision", an
image's rows see each other on the sliding layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..kvcache import LayerShape
from .contract import register
from .attention import attend
from .base import (ATTENTION, LLM, ROPE, Block, Metadata, ModelError, Transformer,
                   TransformerConfig, Weights, weight)
from .experts import weighted_sum
from .gemma_parts import cache_donor, check_shared_layers, per_layer_inputs
from .rope import RopeConfig

if TYPE_CHECKING:
    from pyggml import Tensor

# ours, as llama.cpp has no key for it: the checkpoint's use_bidirectional_attention "vision"
IMAGES_BOTH_WAYS = "{arch}.attention.bidirectional_vision"


@dataclass
class Gemma4Config(TransformerConfig):
    sliding: tuple[bool, ...]           # per layer: attends within the window
    layer_ffn: tuple[int, ...]
    layer_kv_heads: tuple[int, ...]
    swa_head_dim: int                   # head_dim is the full layers'
    window: int
    rope: RopeConfig                    # the full layers'
    rope_swa: RopeConfig
    shared_kv_layers: int
    per_layer_embd: int                 # 0: no per-layer embeddings
    experts: int                        # 0: no mixture of experts
    experts_used: int
    expert_ffn: int
    softcap: float                      # of the final logits; 0: none
    images_both_ways: bool = False      # an image's rows see each other on sliding layers

    @classmethod
    def from_metadata(cls, meta: dict) -> "Gemma4Config":
        m = Metadata(meta, "gemma4")
        layers, embd = int(m.require(LLM.BLOCK_COUNT)), int(m.require(LLM.EMBEDDING_LENGTH))
        heads = int(m.require(ATTENTION.HEAD_COUNT))
        head_dim = int(m.get(ATTENTION.KEY_LENGTH, 512))
        swa_head_dim = int(m.get(ATTENTION.KEY_LENGTH_SWA, head_dim))
        ffn = m.per_layer(LLM.FEED_FORWARD_LENGTH, layers)
        kv_heads = m.per_layer(ATTENTION.HEAD_COUNT_KV, layers, heads)
        pattern = m.get(ATTENTION.SLIDING_WINDOW_PATTERN)
        if not isinstance(pattern, (list, tuple)) or len(pattern) != layers:
            key = ATTENTION.SLIDING_WINDOW_PATTERN.format(arch="gemma4")
            raise ModelError(f"Gemma 4 needs {key} as one bool per layer.")
        rope = RopeConfig.from_metadata(m, head_dim, 1e6)
        rope_swa = replace(rope, dims=int(m.get(ROPE.DIMENSION_COUNT_SWA, swa_head_dim)),
                           base=float(m.get(ROPE.FREQ_BASE_SWA, 10000.0)))
        rope_swa.check(m, swa_head_dim, ROPE.DIMENSION_COUNT_SWA)
        experts, experts_used = m.experts()
        return cls(layers=layers, embd=embd, ffn=max(ffn), heads=heads, kv_heads=max(kv_heads),
                   head_dim=head_dim, vocab=m.token_count(),
                   context=int(m.get(LLM.CONTEXT_LENGTH, 131072)),
                   norm_eps=float(m.get(ATTENTION.LAYERNORM_RMS_EPS, 1e-6)),
                   sliding=tuple(bool(s) for s in pattern), layer_ffn=ffn,
                   layer_kv_heads=kv_heads, swa_head_dim=swa_head_dim,
                   window=int(m.get(ATTENTION.SLIDING_WINDOW, 512)), rope=rope,
                   rope_swa=rope_swa, shared_kv_layers=int(m.get(ATTENTION.SHARED_KV_LAYERS, 0)),
                   per_layer_embd=int(m.get(LLM.EMBD_LENGTH_PER_LAYER_INP, 0)),
                   experts=experts, experts_used=experts_used,
                   expert_ffn=int(m.get(LLM.EXPERT_FEED_FORWARD_LENGTH, 0)),
                   softcap=float(m.get(LLM.FINAL_LOGIT_SOFTCAPPING, 0.0)),
                   images_both_ways=bool(m.get(IMAGES_BOTH_WAYS, False)))

    def check(self, m: Metadata) -> None:
        super().check(m)
        if self.swa_head_dim < 1:
            raise m.malformed(ATTENTION.KEY_LENGTH_SWA, self.swa_head_dim, "an empty head")
        for kv_heads in self.layer_kv_heads:
            if kv_heads < 1 or self.heads % kv_heads:
                raise m.malformed(ATTENTION.HEAD_COUNT_KV, list(self.layer_kv_heads),
                                  "with a layer's count that does not divide "
                                  f"{m.name(ATTENTION.HEAD_COUNT)} ({self.heads})")
        check_shared_layers(m, self.shared_kv_layers, self.layers)

    def head_dim_of(self, layer: int) -> int:
        return self.swa_head_dim if self.sliding[layer] else self.head_dim

    @property
    def cached_layers(self) -> int:
        """Layers 0 .. cached_layers - 1 keep a cache; the rest share one of them."""
        return self.layers - self.shared_kv_layers

    def window_of(self, layer: int) -> int | None:
        return self.window if self.sliding[layer] else None

    def cache_of(self, layer: int) -> int:
        """The layer whose cache `layer` reads: itself, or for a sharing layer the last
        cached layer of its kind."""
        return cache_donor(layer, self.cached_layers, self.sliding, "Gemma 4")


@dataclass
class Rows:
    """The batch rows a layer computes: every token's, or, in the layers that share another
    layer's cache (they write none, so no later token reads them), the outputs' alone."""
    n: int
    positions: object                   # int32 (n,)
    select: object = None               # int32 (n,) rows of the batch; None: all of them
    masks: dict = field(default_factory=dict)

    @classmethod
    def outputs(cls, inputs) -> "Rows":
        """The rows whose logits are read."""
        n = inputs.outputs.shape[0]
        return cls(n, inputs.positions.reshape(-1, 1).get_rows(inputs.outputs).reshape(n),
                   inputs.outputs)

    def take(self, x):
        """x (T, ...) for every token -> (n, ...) for these rows."""
        return x if self.select is None else x.get_rows(self.select)

    def mask(self, kv, window):
        if self.select is None:
            return None                             # attend() reads kv.mask(window)
        if window not in self.masks:
            rows = kv.mask(window).get_rows(self.select)                  # F32 (n, n_kv)
            self.masks[window] = rows.cast("F16") if kv.cache.flash else rows
        return self.masks[window]


@dataclass
class Gemma4Block(Block):
    attn_norm: Tensor = weight()
    attn_q: Tensor = weight()
    attn_q_norm: Tensor = weight()
    attn_k: Tensor | None = None            # only the layers that keep a cache
    attn_k_norm: Tensor | None = None
    attn_v: Tensor | None = None            # absent where K = V
    attn_output: Tensor = weight()
    post_attention_norm: Tensor = weight()
    ffn_norm: Tensor = weight()
    ffn_gate: Tensor = weight()
    ffn_up: Tensor = weight()
    ffn_down: Tensor = weight()
    post_ffw_norm: Tensor = weight()
    layer_output_scale: Tensor | None = None
    inp_gate: Tensor | None = None          # per-layer embeddings
    proj: Tensor | None = None
    post_norm: Tensor | None = None
    moe: bool = False                       # experts beside the dense FFN
    ffn_gate_inp: Tensor | None = None
    router_scale: Tensor | None = None      # ffn_gate_inp.scale
    ffn_gate_up_exps: Tensor | None = None
    ffn_down_exps: Tensor | None = None
    expert_scale: Tensor | None = None      # ffn_down_exps.scale
    pre_ffw_norm_2: Tensor | None = None
    post_ffw_norm_1: Tensor | None = None
    post_ffw_norm_2: Tensor | None = None


@register("gemma4")
class Gemma4(Transformer):
    config_class = Gemma4Config
    config: Gemma4Config
    rope_mode = "neox"
    sharing_layers_output_rows_only = True      # off only to measure what it saves

    def __init__(self, config: Gemma4Config, weights: Weights):
        c = self.config = config
        self.bind_ends(weights)
        self.rope_freqs = weights.optional("rope_freqs.weight", (c.head_dim // 2,), "F32")
        self.per_layer_token_embd = None
        if c.per_layer_embd:
            width = c.layers * c.per_layer_embd
            self.per_layer_token_embd = weights.take("per_layer_token_embd.weight")
            if self.per_layer_token_embd.shape[1:] != (width,):
                raise ModelError(f"per_layer_token_embd.weight has shape "
                                 f"{self.per_layer_token_embd.shape}, not (vocab, {width}).")
            self.per_layer_model_proj = weights.take("per_layer_model_proj.weight",
                                                     (width, c.embd))
            self.per_layer_proj_norm = weights.take("per_layer_proj_norm.weight",
                                                    (c.per_layer_embd,))
        self.cache_layer = [c.cache_of(i) for i in range(c.layers)]   # whose cache each reads
        self.blocks = [self._bind_block(weights, i) for i in range(c.layers)]

    def _bind_block(self, weights: Weights, i: int) -> Gemma4Block:
        c, block, prefix = self.config, Gemma4Block(), f"blk.{i}."
        e, d, f = c.embd, c.head_dim_of(i), c.layer_ffn[i]
        q_dim, kv_dim = c.heads * d, c.layer_kv_heads[i] * d
        weights.bind(block, prefix, {
            "attn_norm": (e,), "attn_q": (q_dim, e), "attn_q_norm": (d,),
            "attn_output": (e, q_dim), "post_attention_norm": (e,), "ffn_norm": (e,),
            "ffn_gate": (f, e), "ffn_up": (f, e), "ffn_down": (e, f), "post_ffw_norm": (e,)},
            optional={"layer_output_scale": (1,)})
        if i < c.cached_layers:
            weights.bind(block, prefix, {"attn_k": (kv_dim, e), "attn_k_norm": (d,)},
                         optional={"attn_v": (kv_dim, e)})
        if c.per_layer_embd:
            p = c.per_layer_embd
            weights.bind(block, prefix, {"inp_gate": (p, e), "proj": (e, p), "post_norm": (e,)})
        block.moe = bool(c.experts)
        if block.moe:
            x, g = c.experts, c.expert_ffn
            weights.bind(block, prefix, {
                "ffn_gate_inp": (x, e), "ffn_gate_up_exps": (x, 2 * g, e),
                "ffn_down_exps": (x, e, g), "pre_ffw_norm_2": (e,), "post_ffw_norm_1": (e,),
                "post_ffw_norm_2": (e,)})
            block.router_scale = weights.take(f"{prefix}ffn_gate_inp.scale", (e,))
            block.expert_scale = weights.take(f"{prefix}ffn_down_exps.scale", (x,))
        return block

    @classmethod
    def layer_shapes(cls, config: Gemma4Config) -> list[LayerShape]:
        """Only the layers that keep a cache."""
        return [LayerShape(config.layer_kv_heads[i], config.head_dim_of(i),
                           config.head_dim_of(i), window=config.window_of(i))
                for i in range(config.cached_layers)]

    def windows(self) -> tuple:
        return (None, self.config.window)

    def media_windows(self) -> tuple:
        return (self.config.window,) if self.config.images_both_ways else ()

    def _rope(self, x, positions, layer: int):
        c = self.config
        if c.sliding[layer]:
            return c.rope_swa.apply(x, positions, self.rope_mode)
        return c.rope.apply(x, positions, self.rope_mode, self.rope_freqs)

    def forward(self, inputs, kv):
        c = self.config
        x = self.token_embd.get_rows(inputs.tokens).scale(math.sqrt(c.embd))   # (T, E)
        x = inputs.splice(x)
        per_layer = self._per_layer_inputs(inputs, x) if c.per_layer_embd else None
        caches = {}                               # cached layer -> its K and V cache nodes
        rows = Rows(inputs.n_tokens, inputs.positions)
        n_out = inputs.outputs.shape[0]
        for i, block in enumerate(self.blocks):
            if i == c.cached_layers and n_out < inputs.n_tokens and \
                    self.sharing_layers_output_rows_only:              # outputs' rows from here
                rows = Rows.outputs(inputs)
                x = x.get_rows(inputs.outputs)                                 # (n_out, E)
            x = self._block(i, block, x, per_layer, inputs, rows, kv, caches)
        x = x.rms_norm(c.norm_eps).mul(self.output_norm)                       # (n_out, E)
        logits = self.project(x, inputs)                                       # (n_out, vocab)
        if inputs.embeddings or not c.softcap:
            return logits
        return logits.scale(1.0 / c.softcap).tanh().scale(c.softcap)

    def _block(self, i: int, block, x, per_layer, inputs, rows: Rows, kv, caches):
        """x (n, E) for the rows -> (n, E); the last layer's (n_out, E), cut after its
        attention where the rows were not cut before (Inputs.output_rows)."""
        c, eps = self.config, self.config.norm_eps
        a = self._attention(i, block, x.rms_norm(eps).mul(block.attn_norm), rows, kv, caches)
        if i == self._cut_layer and rows.select is None:
            rows = Rows.outputs(inputs)
            a, x = inputs.output_rows(a, x)                                  # (n_out, E)
        n = rows.n
        x = x.add(a.rms_norm(eps).mul(block.post_attention_norm))
        normed = x.rms_norm(eps)                  # the FFN's, the router's and the experts'
        h = normed.mul(block.ffn_norm)
        f = block.ffn_down.mul_mat(block.ffn_gate.mul_mat(h).geglu(block.ffn_up.mul_mat(h)))
        if block.moe:
            experts = self._experts(block, normed, n).rms_norm(eps).mul(block.post_ffw_norm_2)
            f = f.rms_norm(eps).mul(block.post_ffw_norm_1).add(experts)
        x = x.add(f.rms_norm(eps).mul(block.post_ffw_norm))
        if per_layer is not None:
            t, p = inputs.n_tokens, c.per_layer_embd
            mine = rows.take(per_layer.view((t, p), offset=i * t * p * per_layer.strides[-1]))
            g = block.inp_gate.mul_mat(x).gelu().mul(mine)                          # (n, P)
            x = x.add(block.proj.mul_mat(g).rms_norm(eps).mul(block.post_norm))
        return x if block.layer_output_scale is None else x.mul(block.layer_output_scale)

    def _attention(self, i: int, block, h, rows: Rows, kv, caches):
        """h (n, E) normed -> (n, E). A cached layer writes its K and V (all rows); a
        sharing layer reads its donor's."""
        c, n, eps = self.config, rows.n, self.config.norm_eps
        d, kv_heads = c.head_dim_of(i), c.layer_kv_heads[i]
        q = block.attn_q.mul_mat(h).reshape(n, c.heads, d)                   # (n, H, D)
        q = self._rope(q.rms_norm(eps).mul(block.attn_q_norm), rows.positions, i)
        cache = self.cache_layer[i]
        if cache == i:
            k = block.attn_k.mul_mat(h).reshape(n, kv_heads, d)              # (n, KVH, D)
            v = k if block.attn_v is None else block.attn_v.mul_mat(h).reshape(n, kv_heads, d)
            k = self._rope(k.rms_norm(eps).mul(block.attn_k_norm), rows.positions, i)
            caches[i] = kv.put(i, k, v.rms_norm(eps))
        window = c.window_of(i)
        k_node, v_node = caches[cache]
        a = attend(kv, cache, q, k_node, v_node, 1.0, window,
                   mask=rows.mask(kv, window))                               # (n, H*D)
        return block.attn_output.mul_mat(a)

    def _per_layer_inputs(self, inputs, x):
        """(L, T, P): each layer's per-layer input, from the token's own per-layer
        embedding and a projection of its embedding x (T, E)."""
        c = self.config
        return per_layer_inputs(self.per_layer_token_embd, self.per_layer_model_proj,
                                self.per_layer_proj_norm, inputs, x, c.layers,
                                c.per_layer_embd, c.norm_eps)

    def _experts(self, block, normed, n: int):
        """normed (T, E), the FFN's RMS-normed residual input -> the experts' weighted sum
        (T, E)."""
        c = self.config
        routed = normed.mul(block.router_scale).scale(c.embd ** -0.5)
        probs = block.ffn_gate_inp.mul_mat(routed).soft_max()                # (T, X)
        chosen = probs.top_k(c.experts_used)                                 # (T, K) int32
        picked = probs.reshape(n, c.experts, 1).get_rows(chosen)             # (T, K, 1)
        scaled = probs.mul(block.expert_scale).reshape(n, c.experts, 1).get_rows(chosen)
        weights = scaled.div(picked.reshape(n, -1).sum_rows().reshape(n, 1, 1))
        h = normed.mul(block.pre_ffw_norm_2).reshape(n, 1, c.embd)
        gate_up = block.ffn_gate_up_exps.mul_mat_id(h, chosen)              # (T, K, 2F)
        out = block.ffn_down_exps.mul_mat_id(gate_up.geglu_halves(), chosen)  # (T, K, E)
        return weighted_sum(out, weights)                                    # (T, E)

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys k (cells, KVH, D) of cached layer `layer` by deltas."""
        return self._rope(k, deltas, layer)
