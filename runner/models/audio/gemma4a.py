"""Gemma 4's audio encoder (the Universal Speech Model's conformer), as transformers'
Gemma4AudioModel computes it, from llama.cpp's gemma4a mmproj tensors:

- subsampling: two Conv2d(3x3, stride 2, padding 1, no bias) over (time, mel), each followed
  by a LayerNorm over channels (no bias) and ReLU, frames past the audio zeroed before each;
  the (frequency, channel) plane flattened and projected to the hidden width;
- conformer blocks: a half-step FFN; chunked local attention (blocks of 12 queries, each
  seeing itself and the 11 keys before it; queries scaled by softplus(per_dim_scale) /
  (sqrt(d) ln 2), keys by ln(1 + e) / ln 2; Transformer-XL relative positions from sinusoids
  of distance 12..0; logits soft-capped at 50); a light convolution (GLU, causal depthwise Conv1d,
  RMSNorm, SiLU); a second half-step FFN; RMSNorm. Every linear may be clamped.
- the output projection (with bias), then the embedder: an unweighted RMSNorm and the
  projection into the text model.

GGUF names are llama.cpp's, where the light convolution's norms are swapped: conv_norm is the
norm before it, norm_conv the one after. per_dim_scale holds softplus(parameter) already.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gguf
import numpy as np

from ..base import Metadata, ModelError, Weights, weight
from ..clamped import ClampedBlock, bind_clamps, clamped_linear
from ..contract import register_projector
from ..vision.pixels import Layout, Pixels
from . import melspec

if TYPE_CHECKING:
    from pyggml import Tensor

AUDIO = gguf.Keys.ClipAudio
CHUNK = 12                      # queries per attention block
PAST = 12                       # keys before a query it sees (attention_context_left - 1)
CONTEXT = CHUNK + PAST          # keys per block
LOGIT_CAP = 50.0
MASKED = -1e9                   # the reference's attention_invalid_logits_value
RESIDUAL = 0.5                  # the FFNs' half step
KERNEL = 3                      # the subsampling convolutions'
LINEARS = ("ffn_up", "ffn_down", "attn_q", "attn_k", "attn_v", "attn_out", "conv_pw1",
           "conv_pw2", "ffn_up_1", "ffn_down_1")
MAX_SAMPLES = melspec.MAX_SAMPLES


@dataclass
class ConformerBlock(ClampedBlock):
    ffn_norm: Tensor = weight()             # the first half-step FFN
    ffn_up: Tensor = weight()
    ffn_down: Tensor = weight()
    ffn_post_norm: Tensor = weight()
    attn_pre_norm: Tensor = weight()
    attn_q: Tensor = weight()
    attn_k: Tensor = weight()
    attn_v: Tensor = weight()
    attn_k_rel: Tensor = weight()           # relative positions' keys
    per_dim_scale: Tensor = weight()
    attn_out: Tensor = weight()
    attn_post_norm: Tensor = weight()
    conv_norm: Tensor = weight()            # the light convolution (its norms as llama.cpp
    conv_pw1: Tensor = weight()             # names them: conv_norm before, norm_conv after)
    conv_dw: Tensor = weight()
    norm_conv: Tensor = weight()
    conv_pw2: Tensor = weight()
    ffn_norm_1: Tensor = weight()           # the second half-step FFN
    ffn_up_1: Tensor = weight()
    ffn_down_1: Tensor = weight()
    ffn_post_norm_1: Tensor = weight()
    ln2: Tensor = weight()


@dataclass
class AudioConfig:
    embd: int
    heads: int
    layers: int
    eps: float
    bins: int
    projection: int              # the text model's embedding width

    @classmethod
    def from_metadata(cls, meta: dict) -> "AudioConfig":
        m = Metadata(meta, "clip")
        return cls(embd=int(m.require(AUDIO.EMBEDDING_LENGTH)),
                   heads=int(m.require(AUDIO.Attention.HEAD_COUNT)),
                   layers=int(m.require(AUDIO.BLOCK_COUNT)),
                   eps=float(m.get(AUDIO.Attention.LAYERNORM_EPS, 1e-6)),
                   bins=int(m.get(AUDIO.NUM_MEL_BINS, melspec.BINS)),
                   projection=int(m.require(AUDIO.PROJECTION_DIM)))

    @property
    def head_dim(self) -> int:
        return self.embd // self.heads


def halved(n: int) -> int:
    """Length after one stride-2, kernel-3, padding-1 convolution."""
    return (n - 1) // 2 + 1


def relative_table(embd: int) -> np.ndarray:
    """float32 (PAST + 1, embd): [sin, cos] of distances PAST..0 at the reference's
    timescales."""
    half = embd // 2
    step = math.log(10_000.0) / max(half - 1, 1)
    inverse = np.exp(np.arange(half) * -step)
    scaled = np.arange(PAST, -1, -1)[:, None] * inverse[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


def block_mask(n: int) -> np.ndarray:
    """float32 (blocks, 1, CHUNK, CONTEXT): 0 where query i of block b may see key j (the
    position b*CHUNK - PAST + j within the audio and less than PAST before the query, as the
    reference's mask says), else MASKED."""
    blocks = -(-n // CHUNK)
    query = np.arange(blocks)[:, None, None] * CHUNK + np.arange(CHUNK)[None, :, None]
    key = np.arange(blocks)[:, None, None] * CHUNK - PAST + np.arange(CONTEXT)[None, None, :]
    seen = (key >= 0) & (key < n) & (key <= query) & (query - key < PAST)
    return np.where(seen, 0.0, MASKED).astype(np.float32)[:, None]


@register_projector("gemma4a")
class Gemma4Audio:
    layout = Layout(before=["<|audio>"], after=["<audio|>"])
    max_rows = melspec.tokens(MAX_SAMPLES)

    def __init__(self, config: AudioConfig, weights: Weights):
        c = self.config = config
        self.convs = []
        channels = 1
        for i in range(2):
            conv = weights.take(f"a.conv1d.{i}.weight")
            if conv.shape[1:] != (channels, KERNEL, KERNEL):
                raise ModelError(f"a.conv1d.{i}.weight has shape {conv.shape}, not (out, "
                                 f"{channels}, {KERNEL}, {KERNEL}).")
            channels = conv.shape[0]
            self.convs.append((conv, weights.take(f"a.conv1d.{i}.norm.weight", (channels,))))
        flat = halved(halved(c.bins)) * channels
        self.input_projection = weights.take("a.input_projection.weight", (c.embd, flat))
        ffn = 4 * c.embd
        self.blocks = []
        for i in range(c.layers):
            block = ConformerBlock()
            weights.bind(block, f"a.blk.{i}.", {
                **{norm: (c.embd,) for norm in (
                    "ffn_norm", "ffn_post_norm", "attn_pre_norm", "attn_post_norm",
                    "conv_norm", "norm_conv", "ffn_norm_1", "ffn_post_norm_1", "ln2")},
                "ffn_up": (ffn, c.embd), "ffn_down": (c.embd, ffn),
                "ffn_up_1": (ffn, c.embd), "ffn_down_1": (c.embd, ffn),
                **{name: (c.embd, c.embd) for name in (
                    "attn_q", "attn_k", "attn_v", "attn_out", "attn_k_rel", "conv_pw2")},
                "per_dim_scale": (c.head_dim,), "conv_pw1": (2 * c.embd, c.embd)})
            block.conv_dw = weights.take(f"a.blk.{i}.conv_dw.weight")    # (D, K) or (D, 1, K)
            if block.conv_dw.shape[0] != c.embd or math.prod(block.conv_dw.shape[1:-1]) != 1:
                raise ModelError(f"a.blk.{i}.conv_dw.weight has shape {block.conv_dw.shape}, "
                                 f"not ({c.embd}, kernel).")
            bind_clamps(block, weights, f"a.blk.{i}.", LINEARS)
            self.blocks.append(block)
        self.output = weights.take("a.pre_encode.out.weight")
        self.output_b = weights.take("a.pre_encode.out.bias", self.output.shape[:1])
        self.embedding = weights.take("mm.a.input_projection.weight",
                                      (c.projection, self.output.shape[0]))
        self.relative = relative_table(c.embd)

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights) -> "Gemma4Audio":
        return cls(AudioConfig.from_metadata(meta), weights)

    def preprocess(self, samples: np.ndarray) -> Pixels:
        """At most 30 s of 16 kHz samples -> mel frames (patches), grid (frames still real
        after the first convolution, rows), the attention mask and relative table inputs."""
        features, real = melspec.log_mel(samples)
        first = melspec.subsampled(real)
        rows = int(melspec.subsampled(first).sum())
        if rows == 0:
            raise ValueError("The audio is too short to make a single row (40 ms at least).")
        return Pixels(features, (int(first.sum()), rows), rows,
                      {"mask": block_mask(rows), "relative": self.relative})

    def largest(self) -> Pixels:
        return self.preprocess(np.zeros(MAX_SAMPLES, np.float32))

    def forward(self, patches, grid: tuple[int, int], mask, relative, flash: bool = False):
        """patches (frames, bins) log-mel -> (rows, text embd). flash is not used: the
        blocked attention with its relative-position scores has no fused form."""
        c = self.config
        first_real, rows = grid
        frames = patches.shape[0]
        x = patches.reshape(1, 1, frames, c.bins)                         # (1, 1, T, F)
        x = self._subsample(x, *self.convs[0])                            # (T1, F1, C0)
        if first_real < x.shape[0]:                      # the reference zeroes padding frames
            kept = x.view((first_real,) + x.shape[1:], strides=x.strides)
            x = kept.pad([(0, x.shape[0] - first_real), (0, 0), (0, 0)])
        planes = x.permute(2, 0, 1).cont()                                # (C0, T1, F1)
        x = self._subsample(planes.reshape((1,) + planes.shape), *self.convs[1])  # (T2, F2, C1)
        x = x.view((rows,) + x.shape[1:], strides=x.strides).cont()
        x = self.input_projection.mul_mat(x.reshape(rows, -1))            # (N, D)
        for block in self.blocks:
            x = self._block(x, block, mask, relative)
        x = self.output.mul_mat(x).add(self.output_b)                     # (N, P)
        return self.embedding.mul_mat(x.rms_norm(c.eps))                  # (N, E)

    def _subsample(self, x, kernel, norm):
        """x (1, C, T, F) -> (T', F', C') channels last: conv, LayerNorm over channels, ReLU."""
        ctx = x.context
        bound = ctx.bind(kernel)
        cols = bound.im2col(x, (2, 2), (1, 1), dtype="F32")               # (1, T', F', C*9)
        matrix = bound.reshape(kernel.shape[0], -1)
        out = matrix.mul_mat(cols)                                        # (1, T', F', C')
        out = out.reshape(out.shape[1:])
        return out.norm(self.config.eps).mul(norm).relu()

    def _block(self, x, block: ConformerBlock, mask, relative):
        c = self.config
        x = self._half_ffn(x, block, "ffn_norm", "ffn_up", "ffn_down", "ffn_post_norm")
        h = x.rms_norm(c.eps).mul(block.attn_pre_norm)
        a = clamped_linear(block, "attn_out", self._attention(h, block, mask, relative))
        x = x.add(a.rms_norm(c.eps).mul(block.attn_post_norm))
        x = x.add(self._light_conv(x, block))
        x = self._half_ffn(x, block, "ffn_norm_1", "ffn_up_1", "ffn_down_1", "ffn_post_norm_1")
        return x.rms_norm(c.eps).mul(block.ln2)

    def _half_ffn(self, x, block: ConformerBlock, pre: str, up: str, down: str, post: str):
        eps = self.config.eps
        h = clamped_linear(block, up, x.rms_norm(eps).mul(getattr(block, pre))).silu()
        h = clamped_linear(block, down, h).rms_norm(eps).mul(getattr(block, post))
        return x.add(h.scale(RESIDUAL))

    def _light_conv(self, x, block: ConformerBlock):
        """GLU, causal depthwise conv over time, RMSNorm, SiLU, linear: (N, D) -> (N, D)."""
        c = self.config
        n, d = x.shape
        h = clamped_linear(block, "conv_pw1", x.rms_norm(c.eps).mul(block.conv_norm))  # (N, 2D)
        values = h.view((n, d), strides=h.strides).cont()
        gates = h.view((n, d), offset=d * h.strides[-1], strides=h.strides).cont()
        h = values.mul(gates.sigmoid())                                                # (N, D)
        width = block.conv_dw.shape[-1]
        kernel = x.context.bind(block.conv_dw).reshape(d, 1, width)
        series = h.transpose().cont().pad([(0, 0), (width - 1, 0)])                   # (D, N+K-1)
        h = kernel.conv_1d_dw(series).transpose().cont()                              # (N, D)
        h = h.rms_norm(c.eps).mul(block.norm_conv).silu()
        return clamped_linear(block, "conv_pw2", h)

    def _attention(self, h, block: ConformerBlock, mask, relative):
        """Chunked local attention with relative positions: h (N, D) -> (N, D)."""
        c = self.config
        n, heads, d = h.shape[0], c.heads, c.head_dim
        blocks = -(-n // CHUNK)
        padded = blocks * CHUNK
        q = clamped_linear(block, "attn_q", h).reshape(n, heads, d)
        q = q.mul(block.per_dim_scale).scale(d ** -0.5 / math.log(2))
        k = clamped_linear(block, "attn_k", h).scale(math.log(1 + math.e) / math.log(2))
        v = clamped_linear(block, "attn_v", h)
        queries = q.pad([(0, padded - n), (0, 0), (0, 0)]) \
            .reshape(blocks, CHUNK, heads, d).permute(0, 2, 1, 3)          # (B, H, 12, d)
        keys = _windows(k.reshape(n, heads, d), blocks).permute(0, 2, 1, 3).cont()
        values = _windows(v.reshape(n, heads, d), blocks).permute(0, 2, 3, 1).cont()
        content = keys.mul_mat(queries)                                    # (B, H, 12, 24)
        rel = block.attn_k_rel.mul_mat(relative).reshape(PAST + 1, heads, d) \
            .permute(1, 0, 2).cont().reshape(1, heads, PAST + 1, d)        # (1, H, 13, d)
        position = _shifted(rel.mul_mat(queries), blocks, heads)           # (B, H, 12, 24)
        logits = content.add(position).scale(1 / LOGIT_CAP).tanh().scale(LOGIT_CAP)
        probs = logits.add(mask).soft_max(None, 1.0)
        out = values.mul_mat(probs)                                        # (B, H, 12, d)
        out = out.permute(0, 2, 1, 3).cont().reshape(padded, heads * d)
        return out.view((n, heads * d), strides=out.strides)


def _windows(x, blocks: int):
    """x (N, H, d) -> (B, CONTEXT, H, d): for each block of CHUNK queries, the PAST keys
    before it and its own (zeros beyond the audio): two block-shifted views of one padded
    tensor, side by side."""
    n = x.shape[0]
    padded = x.pad([(PAST, blocks * CHUNK - n), (0, 0), (0, 0)])        # (PAST + B*12, H, d)
    shape = (blocks, CHUNK) + padded.shape[1:]
    before = padded.view(shape)
    own = padded.view(shape, offset=PAST * padded.strides[0])
    return before.concat(own, 1)


def _shifted(scores, blocks: int, heads: int):
    """Transformer-XL's shift: scores (B, H, 12, PAST + 1) over distances PAST..0 ->
    (B, H, 12, CONTEXT), query i's score for key j at column j - i (zero outside)."""
    wide = scores.pad([(0, 0), (0, 0), (0, 0), (0, CONTEXT + 1 - (PAST + 1))])  # (.., 25)
    flat = wide.reshape(blocks, heads, CHUNK * (CONTEXT + 1))
    cut = flat.view((blocks, heads, CHUNK * CONTEXT), strides=flat.strides).cont()
    return cut.reshape(blocks, heads, CHUNK, CONTEXT)
