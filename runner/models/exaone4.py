"""EXAONE 4.0 (1.2B, 32B), as llama.cpp's exaone4 runs it: norms after each sublayer only
(the attention's output RMS-normed by post_attention_norm and the FFN's by post_ffw_norm
before the residual adds them; neither sublayer's input is normed), Q and K RMS-normed per
head, NEOX rope with Llama 3's frequency factors (rope_freqs) where the file has them.

Hybrid attention as llama.cpp decides it, by the layer count alone: a model of 64 layers
(the 32B) slides a window (attention.sliding_window, 4096 where the file gives none) on the
layers attention.sliding_window_pattern names (every fourth global where it names none),
and only those layers rotate: the global ones have no rope, and a context shift leaves
their keys as they are. Any other model attends to the whole context on every layer, each
rotated, whatever window its file names. NextN layers past the file's layers are not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .attention import attention
from .base import ATTENTION, LLM, ROPE, Block, Metadata, Weights, weight
from .contract import register
from .llama import Llama, LlamaConfig

if TYPE_CHECKING:
    from pyggml import Tensor

SWA_LAYERS = 64                  # the 32B's: llama.cpp's exaone4 slides windows there alone
DEFAULT_WINDOW, DEFAULT_PATTERN = 4096, 4


@dataclass
class Exaone4Block(Block):
    attn_q: Tensor = weight()
    attn_k: Tensor = weight()
    attn_v: Tensor = weight()
    attn_q_bias: Tensor | None = None       # llama.cpp reads them where a file has them
    attn_k_bias: Tensor | None = None
    attn_v_bias: Tensor | None = None
    attn_q_norm: Tensor = weight()          # per head (D,)
    attn_k_norm: Tensor = weight()
    attn_output: Tensor = weight()
    post_attention_norm: Tensor = weight()
    ffn_gate: Tensor = weight()
    ffn_up: Tensor = weight()
    ffn_down: Tensor = weight()
    post_ffw_norm: Tensor = weight()


@dataclass
class Exaone4Config(LlamaConfig):
    window: int | None = None               # the 64-layer model's sliding layers'

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "exaone4") -> Exaone4Config:
        m = Metadata(meta, arch)
        m.require(ATTENTION.LAYERNORM_RMS_EPS)                          # llama.cpp's too
        base = LlamaConfig.from_metadata(meta, arch)
        layers = m.layers_run()
        if layers != SWA_LAYERS:
            return cls(**{**vars(base), "layers": layers})
        window = int(m.get(ATTENTION.SLIDING_WINDOW, DEFAULT_WINDOW))
        if window < 1:
            raise m.malformed(ATTENTION.SLIDING_WINDOW, window, "but a sliding layer must "
                              "see at least its own position")
        sliding = m.sliding_layers(base.layers, DEFAULT_PATTERN)[:layers]
        return cls(**{**vars(base), "layers": layers, "rope_layers": sliding}, window=window)

    def window_of(self, layer: int) -> int | None:
        """The sliding layers are the rotated ones (rope_layers: all, without windows)."""
        return self.window if self.window and self.uses_rope(layer) else None

    def check(self, m: Metadata) -> None:
        """llama.cpp's exaone4 rotates whole heads of one size for keys and values, and
        sizes the output projection by embedding_length."""
        super().check(m)
        if self.rope.dims != self.head_dim:
            raise m.malformed(ROPE.DIMENSION_COUNT, self.rope.dims, "not the head size "
                              f"({self.head_dim}), which exaone4 rotates whole")
        value_length = m.get(ATTENTION.VALUE_LENGTH, self.head_dim)
        if value_length != self.head_dim:
            raise m.malformed(ATTENTION.VALUE_LENGTH, value_length, "not the keys' head size "
                              f"({self.head_dim})")
        if self.heads * self.head_dim != self.embd:
            raise m.malformed(ATTENTION.HEAD_COUNT, self.heads, f"whose heads of "
                              f"{self.head_dim} do not make up {m.name(LLM.EMBEDDING_LENGTH)} "
                              f"({self.embd}), as exaone4's output projection needs")


@register("exaone4")
class Exaone4(Llama):
    """Llama's rope, Q/K projection and shift (a layer without rope keeps its keys); its
    own blocks, norms after the sublayers."""
    config_class = Exaone4Config
    config: Exaone4Config
    rope_mode = "neox"

    def __init__(self, config: Exaone4Config, weights: Weights):
        c = self.config = config
        q_dim, kv_dim = c.heads * c.head_dim, c.kv_heads * c.head_dim
        self.bind_ends(weights)
        self.rope_freqs = weights.optional("rope_freqs.weight", (c.rope.dims // 2,), "F32")
        self.blocks = []
        for i in range(c.layers):
            prefix, block = f"blk.{i}.", Exaone4Block()
            weights.bind(block, prefix, {
                "attn_q": (q_dim, c.embd), "attn_k": (kv_dim, c.embd),
                "attn_v": (kv_dim, c.embd), "attn_q_norm": (c.head_dim,),
                "attn_k_norm": (c.head_dim,), "attn_output": (c.embd, q_dim),
                "post_attention_norm": (c.embd,), "ffn_gate": (c.ffn, c.embd),
                "ffn_up": (c.ffn, c.embd), "ffn_down": (c.embd, c.ffn),
                "post_ffw_norm": (c.embd,)})
            for name, rows in (("attn_q", q_dim), ("attn_k", kv_dim), ("attn_v", kv_dim)):
                setattr(block, f"{name}_bias", weights.optional(f"{prefix}{name}.bias", (rows,)))
            self.blocks.append(block)

    def windows(self) -> tuple:
        return (None,) if self.config.window is None else (None, self.config.window)

    def forward(self, inputs, kv):
        c, eps, d = self.config, self.config.norm_eps, self.config.head_dim
        x = inputs.splice(self.token_embd.get_rows(inputs.tokens))           # (T, E)
        if not any(c.uses_rope(i) for i in range(c.layers)):
            inputs.first.append(inputs.positions)    # read by no layer: the engine fills them
        for i, block in enumerate(self.blocks):
            q = self._project(block.attn_q, block.attn_q_bias, block.attn_q_norm, x, c.heads,
                              d, eps)                                         # (T, H, D)
            k = self._project(block.attn_k, block.attn_k_bias, block.attn_k_norm, x,
                              c.kv_heads, d, eps)                             # (T, KVH, D)
            v = self._project(block.attn_v, block.attn_v_bias, None, x, c.kv_heads, d, eps)
            if c.uses_rope(i):
                q = c.rope.apply(q, inputs.positions, self.rope_mode, self.rope_freqs)
                k = c.rope.apply(k, inputs.positions, self.rope_mode, self.rope_freqs)
            a = attention(kv, i, q, k, v, c.kq_scale, c.window_of(i))       # (T, H*D)
            if i == self._cut_layer:
                a, x = inputs.output_rows(a, x)                              # (n_out, ...)
            a = block.attn_output.mul_mat(a)                                 # (T, E)
            x = x.add(a.rms_norm(eps).mul(block.post_attention_norm))
            gated = block.ffn_gate.mul_mat(x).swiglu(block.ffn_up.mul_mat(x))   # (T, F)
            f = block.ffn_down.mul_mat(gated)                                # (T, E)
            x = x.add(f.rms_norm(eps).mul(block.post_ffw_norm))
        x = x.rms_norm(eps).mul(self.output_norm)                            # (n_out, E)
        return self.project(x, inputs)                                       # (n_out, vocab)
