"""Gemma 3n (text): Gemma 3's attention block inside AltUp, with Laurel, per-layer inputs,
KV sharing and activation sparsity, as llama.cpp's gemma3n computes it.

- AltUp: the residual stream is A copies (4). Each layer predicts all of them from the
  active one (a router's tanh modalities weigh an A x A mix), runs the block on the active
  prediction, and corrects every copy by the innovation (the block's output minus the
  prediction) times per-copy coefficients. The copies start as projections of the
  embedding rescaled to its magnitude and end unprojected, rescaled and averaged.
- Laurel: a low-rank residual branch (E -> rank -> E, RMS-normed) beside the attention;
  the two are summed and scaled by 1/sqrt(2).
- Per-layer inputs (gemma_parts.py, as Gemma 4's) gate a branch added to the copies other
  than the active one.
- The last shared_kv_layers layers keep no cache and read the last cached layer of their
  kind (gemma_parts.py).
- Activation sparsity: on the layers whose activation_sparsity_scale is not 0, the FFN's
  gate keeps only what exceeds mean + scale * std of its row (a Gaussian top-k; std with
  n - 1, as llama.cpp computes it, where transformers divides by n: 4e-5 apart at the
  released models' 16384).
- Attention is unscaled (Q/K norms set the scale), V is RMS-normed without a weight, norms
  multiply by their weight (not 1 + weight), the logits are soft-capped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..kvcache import LayerShape
from .contract import register
from .attention import attend
from .base import (ATTENTION, LLM, ROPE, Metadata, ModelError, Transformer, TransformerConfig,
                   weight)
from .gemma3 import Gemma3Block
from .gemma_parts import cache_donor, check_shared_layers, per_layer_inputs
from .rope import RopeConfig

if TYPE_CHECKING:
    from pyggml import Tensor

ARCH = "gemma3n"
LOCAL_ROPE_BASE = 10000.0       # llama.cpp's, fixed for gemma3n
# llama.cpp's gemma3n cuts at this multiple of the std whatever the file says: its float32
# literal of the normal quantile at 0.95, 2 ulp below the file's (torch's float32 quantile,
# as its converter writes it). Where the file asks for that quantile we take llama.cpp's,
# so that the logits are its, to the bit.
LLAMA_CPP_STD_MULTIPLIER = 1.6448533535003662
# Ollama's converter's names for what llama.cpp's calls key_length and rope.freq_base_swa
OLLAMA_HEAD_DIM, OLLAMA_LOCAL_BASE = "{arch}.head_dim", "{arch}.rope.freq_base_local"


@dataclass
class Gemma3nConfig(TransformerConfig):
    window: int
    sliding: list[bool]
    rope: RopeConfig
    rope_swa: RopeConfig
    altup: int                  # copies of the residual stream
    active: int                 # the one the block computes
    per_layer_embd: int
    shared_kv_layers: int
    sparsity: list[float]       # per layer: the std multiplier, 0 for none
    softcap: float

    @classmethod
    def from_metadata(cls, meta: dict) -> Gemma3nConfig:
        m = Metadata(meta, ARCH)
        embd, heads = int(m.require(LLM.EMBEDDING_LENGTH)), int(m.require(ATTENTION.HEAD_COUNT))
        layers = int(m.require(LLM.BLOCK_COUNT))
        head_dim = int(m.get(ATTENTION.KEY_LENGTH) or m.require(OLLAMA_HEAD_DIM))
        ffn = m.per_layer(LLM.FEED_FORWARD_LENGTH, layers)
        if len(set(ffn)) != 1:
            raise ModelError("Gemma 3n with FFN widths that differ by layer is not supported.")
        rope = RopeConfig.from_metadata(m, head_dim, 1e6)
        pattern = m.require(ATTENTION.SLIDING_WINDOW_PATTERN)
        sliding = [bool(s) for s in pattern] if isinstance(pattern, list) else []
        sparsity = [LLAMA_CPP_STD_MULTIPLIER if abs(s - LLAMA_CPP_STD_MULTIPLIER) < 1e-6
                    else s for s in m.per_layer(LLM.ACTIVATION_SPARSITY_SCALE, layers, 0.0)]
        if len(sliding) != layers:
            raise ModelError("Gemma 3n's sliding window pattern needs one value per layer "
                             f"({layers}).")
        return cls(layers=layers, embd=embd, ffn=ffn[0],
                   heads=heads, kv_heads=int(m.get(ATTENTION.HEAD_COUNT_KV, heads)),
                   head_dim=head_dim, vocab=m.token_count(),
                   context=int(m.get(LLM.CONTEXT_LENGTH, 32768)),
                   norm_eps=float(m.get(ATTENTION.LAYERNORM_RMS_EPS, 1e-6)),
                   window=int(m.require(ATTENTION.SLIDING_WINDOW)), sliding=sliding, rope=rope,
                   rope_swa=replace(rope, base=float(m.get(ROPE.FREQ_BASE_SWA) or m.get(
                       OLLAMA_LOCAL_BASE, LOCAL_ROPE_BASE)), freq_scale=1.0),
                   altup=int(m.require(LLM.ALTUP_NUM_INPUTS)),
                   active=int(m.get(LLM.ALTUP_ACTIVE_IDX, 0)),
                   per_layer_embd=int(m.require(LLM.EMBD_LENGTH_PER_LAYER_INP)),
                   shared_kv_layers=int(m.get(ATTENTION.SHARED_KV_LAYERS, 0)),
                   sparsity=sparsity,
                   softcap=float(m.get(LLM.FINAL_LOGIT_SOFTCAPPING, 0.0)))

    def check(self, m: Metadata) -> None:
        super().check(m)
        if self.active >= self.altup:
            raise m.malformed(LLM.ALTUP_ACTIVE_IDX, self.active, "not one of the "
                              f"{self.altup} copies of {m.name(LLM.ALTUP_NUM_INPUTS)}")
        check_shared_layers(m, self.shared_kv_layers, self.layers)

    @property
    def cached_layers(self) -> int:
        return self.layers - self.shared_kv_layers

    def window_of(self, layer: int) -> int | None:
        return self.window if self.sliding[layer] else None


@dataclass
class Gemma3nBlock(Gemma3Block):
    """Gemma 3's attention and FFN weights (attn_k, attn_k_norm and attn_v only in the layers
    that keep a cache), and AltUp's, Laurel's and the per-layer input's."""
    altup_correct_coef: Tensor = weight()       # (A, A)
    altup_correct_scale: Tensor = weight()      # (E,)
    altup_predict_coef: Tensor = weight()       # (A * A, A)
    altup_router: Tensor = weight()             # (A, E)
    altup_router_norm: Tensor = weight()
    laurel_l: Tensor = weight()                 # (rank, E)
    laurel_r: Tensor = weight()                 # (E, rank)
    laurel_post_norm: Tensor = weight()
    inp_gate: Tensor = weight()                 # (P, E)
    proj: Tensor = weight()                     # (E, P)
    post_norm: Tensor = weight()


@register(ARCH)
class Gemma3n(Transformer):
    config_class = Gemma3nConfig
    config: Gemma3nConfig
    rope_mode = "neox"

    def __init__(self, config: Gemma3nConfig, weights):
        c = self.config = config
        e, a, p = c.embd, c.altup, c.per_layer_embd
        self.bind_ends(weights)
        self.per_layer_token_embd = weights.take("per_layer_token_embd.weight")
        if self.per_layer_token_embd.shape[1:] != (c.layers * p,):
            raise ModelError(f"per_layer_token_embd.weight has shape "
                             f"{self.per_layer_token_embd.shape}, not (vocab, {c.layers * p}).")
        self.per_layer_model_proj = weights.take("per_layer_model_proj.weight", (c.layers * p, e))
        self.per_layer_proj_norm = weights.take("per_layer_proj_norm.weight", (p,))
        self.altup_proj = weights.take("altup_proj.weight", (a - 1, e, e))
        self.altup_unembd_proj = weights.take("altup_unembd_proj.weight", (a - 1, e, e))
        self.cache_layer = [cache_donor(i, c.cached_layers, c.sliding, "Gemma 3n")
                            for i in range(c.layers)]
        self.blocks = [self._bind_block(weights, i) for i in range(c.layers)]

    def _bind_block(self, weights, i: int) -> Gemma3nBlock:
        c, block = self.config, Gemma3nBlock()
        e, a, p, q, kv = c.embd, c.altup, c.per_layer_embd, c.heads * c.head_dim, \
            c.kv_heads * c.head_dim
        rank = weights.take(f"blk.{i}.laurel_l.weight").shape[0]
        shapes = {"attn_norm": (e,), "attn_q": (q, e), "attn_q_norm": (c.head_dim,),
                  "attn_output": (e, q), "post_attention_norm": (e,), "ffn_norm": (e,),
                  "ffn_gate": (c.ffn, e), "ffn_up": (c.ffn, e), "ffn_down": (e, c.ffn),
                  "post_ffw_norm": (e,), "altup_correct_coef": (a, a),
                  "altup_correct_scale": (e,), "altup_predict_coef": (a * a, a),
                  "altup_router": (a, e), "altup_router_norm": (e,), "laurel_l": (rank, e),
                  "laurel_r": (e, rank), "laurel_post_norm": (e,), "inp_gate": (p, e),
                  "proj": (e, p), "post_norm": (e,)}
        if self.cache_layer[i] == i:
            shapes.update(attn_k=(kv, e), attn_k_norm=(c.head_dim,), attn_v=(kv, e))
        weights.bind(block, f"blk.{i}.", shapes)
        return block

    @classmethod
    def layer_shapes(cls, config: Gemma3nConfig) -> list[LayerShape]:
        """Only the layers that keep a cache."""
        return [LayerShape(config.kv_heads, config.head_dim, config.head_dim,
                           window=config.window_of(i)) for i in range(config.cached_layers)]

    def windows(self) -> tuple:
        return (None, self.config.window)

    def forward(self, inputs, kv):
        c, n, eps = self.config, inputs.n_tokens, self.config.norm_eps
        x = self.token_embd.get_rows(inputs.tokens).scale(math.sqrt(c.embd))   # (T, E)
        per_layer = per_layer_inputs(self.per_layer_token_embd, self.per_layer_model_proj,
                                     self.per_layer_proj_norm, inputs, x, c.layers,
                                     c.per_layer_embd, eps)                    # (L, T, P)
        added = self.altup_proj.mul_mat(x.reshape(1, n, c.embd).repeat(c.altup - 1, n, c.embd))
        x = x.reshape(1, n, c.embd).concat(_rescaled(added, x), axis=0)       # (A, T, E)
        caches = {}
        for i, block in enumerate(self.blocks):
            x = self._layer(i, block, x, _slice(per_layer, i), inputs, kv, caches)
        rest = _rest(x)                                                        # (A-1, T, E)
        unembedded = _rescaled(self.altup_unembd_proj.mul_mat(rest), _slice(x, c.active))
        out = _slice(x, 0)
        for copy in range(c.altup - 1):
            out = out.add(_slice(unembedded, copy))
        out = out.scale(1.0 / c.altup).get_rows(inputs.outputs)               # (n_out, E)
        logits = self.project(out.rms_norm(eps).mul(self.output_norm), inputs)
        if inputs.embeddings or not c.softcap:
            return logits
        return logits.scale(1.0 / c.softcap).tanh().scale(c.softcap)

    def _layer(self, i: int, block: Gemma3nBlock, x, per_layer, inputs, kv, caches):
        """x (A, T, E), the copies -> (A, T, E)."""
        c, eps = self.config, self.config.norm_eps
        predictions = self._predict(block, x)                                  # (A, T, E)
        active = _slice(predictions, c.active)                                 # (T, E)
        h = active.rms_norm(eps).mul(block.attn_norm)
        low_rank = block.laurel_r.mul_mat(block.laurel_l.mul_mat(h))
        laurel = low_rank.rms_norm(eps).mul(block.laurel_post_norm).add(h)
        a = self._attention(i, block, h, inputs, kv, caches)
        a = a.rms_norm(eps).mul(block.post_attention_norm).add(active)
        attn_laurel = a.add(laurel).scale(1.0 / math.sqrt(2.0))
        f = attn_laurel.rms_norm(eps).mul(block.ffn_norm)
        up, gate = block.ffn_up.mul_mat(f), block.ffn_gate.mul_mat(f)          # (T, F)
        if c.sparsity[i]:
            gate = _gaussian_top_k(gate, c.sparsity[i])
        f = block.ffn_down.mul_mat(up.mul(gate.gelu()))
        out = f.rms_norm(eps).mul(block.post_ffw_norm).add(attn_laurel)        # (T, E)
        corrected = self._correct(block, predictions, out)                     # (A, T, E)
        first = _slice(corrected, c.active).mul(block.altup_correct_scale)
        first = block.inp_gate.mul_mat(first).gelu().mul(per_layer)            # (T, P)
        first = block.proj.mul_mat(first).rms_norm(eps).mul(block.post_norm)   # (T, E)
        n = inputs.n_tokens
        return _slice(corrected, 0).reshape(1, n, c.embd).concat(
            _rest(corrected).add(first), axis=0)

    def _modalities(self, block: Gemma3nBlock, x):
        """x (T, E) -> the router's tanh modalities (T, A)."""
        c = self.config
        routed = x.rms_norm(c.norm_eps).mul(block.altup_router_norm).scale(1.0 / c.embd)
        return block.altup_router.mul_mat(routed).tanh()

    def _predict(self, block: Gemma3nBlock, x):
        """x (A, T, E) -> each copy predicted as a mix of all, plus itself."""
        c, n = self.config, x.shape[1]
        coefs = block.altup_predict_coef.mul_mat(self._modalities(block, _slice(x, c.active)))
        coefs = coefs.reshape(n, c.altup, c.altup)                             # (T, A, A)
        mixed = x.permute(1, 2, 0).cont().mul_mat(coefs)                       # (T, A, E)
        return mixed.permute(1, 0, 2).cont().add(x)                            # (A, T, E)

    def _correct(self, block: Gemma3nBlock, predictions, activated):
        """Each copy moved by the innovation (activated - the active prediction) times its
        coefficient plus one."""
        c, n = self.config, activated.shape[0]
        coefs = block.altup_correct_coef.mul_mat(self._modalities(block, activated)) \
            .scale(1.0, bias=1.0)                                              # (T, A)
        coefs = coefs.transpose().cont().reshape(c.altup, n, 1)                # (A, T, 1)
        innovation = activated.sub(_slice(predictions, c.active))             # (T, E)
        innovation = innovation.reshape(1, n, c.embd).repeat(c.altup, n, c.embd)
        return innovation.mul(coefs).add(predictions)

    def _attention(self, i: int, block: Gemma3nBlock, h, inputs, kv, caches):
        """h (T, E) normed -> (T, E). A cached layer writes its K and V; a sharing layer
        reads its donor's."""
        c, n, eps = self.config, inputs.n_tokens, self.config.norm_eps
        q = block.attn_q.mul_mat(h).reshape(n, c.heads, c.head_dim)            # (T, H, D)
        q = self._rope(q.rms_norm(eps).mul(block.attn_q_norm), inputs.positions, i)
        cache = self.cache_layer[i]
        if cache == i:
            assert block.attn_k is not None and block.attn_v is not None     # a cached layer's
            k = block.attn_k.mul_mat(h).reshape(n, c.kv_heads, c.head_dim)    # (T, KVH, D)
            v = block.attn_v.mul_mat(h).reshape(n, c.kv_heads, c.head_dim)
            k = self._rope(k.rms_norm(eps).mul(block.attn_k_norm), inputs.positions, i)
            caches[i] = kv.put(i, k, v.rms_norm(eps))
        k_node, v_node = caches[cache]
        return block.attn_output.mul_mat(attend(kv, cache, q, k_node, v_node, 1.0,
                                                c.window_of(i)))

    def _rope(self, x, positions, layer: int):
        c = self.config
        return (c.rope_swa if c.sliding[layer] else c.rope).apply(x, positions, self.rope_mode)

    def shift(self, k, deltas, layer: int):
        """Re-rotate cached keys k (cells, KVH, D) of cached layer `layer` by deltas."""
        return self._rope(k, deltas, layer)


def _slice(x, index: int):
    """x (A, T, W) -> its index-th (T, W), a view."""
    _, n, width = x.shape
    return x.view((n, width), offset=index * x.strides[0], strides=x.strides[1:])


def _rest(x):
    """x (A, T, W) -> copies 1 .. A-1 (A-1, T, W), a view."""
    copies, n, width = x.shape
    return x.view((copies - 1, n, width), offset=x.strides[0], strides=x.strides)


def _magnitude(x):
    """x (..., E) -> sqrt of the sum of squares of each row (..., 1)."""
    return x.sqr().sum_rows().sqrt()


def _rescaled(x, target):
    """x (..., T, E) rescaled row by row to the magnitudes of target (T, E)."""
    return x.mul(_magnitude(target)).div(_magnitude(x))


def _gaussian_top_k(x, multiplier: float):
    """x (T, F) less mean + multiplier * std of its row, floored at 0 (std over n - 1)."""
    mean = x.mean()                                                            # (T, 1)
    spread = x.sub(mean).sqr().sum_rows().scale(1.0 / (x.shape[-1] - 1)).sqrt()
    return x.sub(mean.add(spread.scale(multiplier))).relu()
