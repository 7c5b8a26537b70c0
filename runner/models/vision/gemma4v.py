"""Gemma 4's vision: the image keeps its aspect ratio, resized (bicubic) to the most patches
its soft-token budget allows with sides a multiple of pooling x patch; patch embedding with
learned x and y position tables; blocks of RMSNorms around attention (per-head Q/K norms, an
unweighted V norm, 2-D NeoX RoPE: the first half of each head rotated by x, the second by y,
base 100, no score scaling) and a GELU-gated MLP, every linear optionally clamped on both
sides (ClippableLinear); a k x k average pool of the grid scaled by sqrt(D), an optional
standardisation, then an unweighted RMSNorm and the projection into the text model.

Tensor names are llama.cpp's (gemma4v mmproj): the patch embedding stored as a conv kernel
(D, 3, p, p), the two position tables as v.position_embd (2, P, D), clamps as scalar tensors
<linear>.input_min/.input_max/.output_min/.output_max.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gguf
import numpy as np

from ..contract import register_projector
from .pixels import Layout, Pixels
from . import images
from ..base import Metadata, ModelError, Weights, weight
from ..clamped import ClampedBlock, bind_clamps, clamped_linear
from .vit import ViTConfig, attend_all, embed_patches, patchify, rope_halves

if TYPE_CHECKING:
    from pyggml import Tensor

VISION = gguf.Keys.ClipVision
ROPE_BASE = 100.0
DEFAULT_POOL = 3
DEFAULT_MAX_TOKENS = 280               # the reference processor's max_soft_tokens
MAX_TOKENS = "clip.vision.image_max_tokens"     # ours: the soft-token budget of an image
LINEARS = ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up", "ffn_down")
NORMS = ("ln1", "attn_post_norm", "ln2", "ffn_post_norm")


@dataclass
class Gemma4VisionBlock(ClampedBlock):
    ln1: Tensor = weight()
    attn_q: Tensor = weight()
    attn_k: Tensor = weight()
    attn_v: Tensor = weight()
    attn_q_norm: Tensor = weight()
    attn_k_norm: Tensor = weight()
    attn_out: Tensor = weight()
    attn_post_norm: Tensor = weight()
    ln2: Tensor = weight()
    ffn_gate: Tensor = weight()
    ffn_up: Tensor = weight()
    ffn_down: Tensor = weight()
    ffn_post_norm: Tensor = weight()


def fitted_size(height: int, width: int, patch: int, max_patches: int,
                pool: int) -> tuple[int, int]:
    """The reference's aspect-ratio-preserving size: the most pixels within max_patches
    patches, each side a multiple of pool * patch."""
    factor = math.sqrt(max_patches * patch ** 2 / (height * width))
    side = pool * patch
    target_h = int(math.floor(factor * height / side)) * side
    target_w = int(math.floor(factor * width / side)) * side
    longest = (max_patches // pool ** 2) * side
    if target_h == 0 and target_w == 0:
        raise images.ImageError(f"A {width}x{height} image cannot be resized to whole "
                                f"{side}-pixel cells.")
    if target_h == 0:
        target_h, target_w = side, min(int(math.floor(width / height)) * side, longest)
    elif target_w == 0:
        target_w, target_h = side, min(int(math.floor(height / width)) * side, longest)
    return target_h, target_w


@register_projector("gemma4v")
class Gemma4Vision:
    layout = Layout(before=["<|image>"], after=["<image|>"], bidirectional=True)

    def __init__(self, config: ViTConfig, pool: int, max_tokens: int, weights: Weights):
        c = self.config = config
        self.pool, self.max_tokens = pool, max_tokens
        d = c.head_dim
        self.patch_embd = weights.take("v.patch_embd.weight", (c.embd, 3, c.patch, c.patch))
        self.position_embd = weights.take("v.position_embd.weight")
        if self.position_embd.shape[0] != 2 or self.position_embd.shape[2] != c.embd:
            raise ModelError(f"v.position_embd.weight has shape {self.position_embd.shape}, "
                             f"not (2, positions, {c.embd}).")
        self.blocks = []
        for i in range(c.layers):
            block = Gemma4VisionBlock()
            weights.bind(block, f"v.blk.{i}.", {
                "attn_q": (c.embd, c.embd), "attn_k": (c.embd, c.embd),
                "attn_v": (c.embd, c.embd), "attn_out": (c.embd, c.embd),
                "attn_q_norm": (d,), "attn_k_norm": (d,), "ffn_gate": (c.ffn, c.embd),
                "ffn_up": (c.ffn, c.embd), "ffn_down": (c.embd, c.ffn),
                **{norm: (c.embd,) for norm in NORMS}})
            bind_clamps(block, weights, f"v.blk.{i}.", LINEARS)
            self.blocks.append(block)
        self.std_bias = weights.optional("v.std_bias", (c.embd,))
        self.std_scale = weights.optional("v.std_scale", (c.embd,))
        self.input_projection = weights.take("mm.input_projection.weight",
                                             (c.projection, c.embd))

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights) -> "Gemma4Vision":
        m = Metadata(meta, "clip")
        return cls(ViTConfig.from_metadata(meta),
                   int(m.get(VISION.Projector.SCALE_FACTOR, DEFAULT_POOL)),
                   int(m.get(MAX_TOKENS, DEFAULT_MAX_TOKENS)), weights)

    @property
    def max_rows(self) -> int:
        return self.max_tokens

    def preprocess(self, image) -> Pixels:
        c, k = self.config, self.pool
        height, width = fitted_size(image.height, image.width, c.patch,
                                    self.max_tokens * k * k, k)
        planes = images.pixels(images.resize(image, height, width, "bicubic"), c.mean, c.std)
        rows, cols = height // c.patch, width // c.patch
        ys, xs = np.divmod(np.arange(rows * cols), cols)
        positions = np.stack([xs, ys]).astype(np.int32)                       # (2, P)
        if max(rows, cols) > self.position_embd.shape[1]:
            raise images.ImageError(f"The image makes a {cols}x{rows} patch grid; the model "
                                    f"knows positions up to {self.position_embd.shape[1]}.")
        return Pixels(patchify(planes, c.patch), (rows, cols), rows * cols // (k * k),
                      {"positions": positions})

    def largest(self) -> Pixels:
        side = int(math.isqrt(self.max_tokens)) * self.pool * self.config.patch
        return self.preprocess(images.blank(side, side))

    def forward(self, patches, grid: tuple[int, int], positions, flash: bool = False):
        """patches (P, 3*p*p), positions int32 (2, P) x and y -> (rows, text embd)."""
        c, ctx = self.config, patches.context
        n = patches.shape[0]
        xs = positions.view((n,))                                             # (P,)
        ys = positions.view((n,), offset=positions.strides[0])
        table = ctx.bind(self.position_embd)
        tables = [table.view(table.shape[1:], offset=i * table.strides[0]) for i in (0, 1)]
        x = embed_patches(patches.scale(2.0, -1.0), self.patch_embd, c)       # (P, D)
        x = x.add(tables[0].get_rows(xs)).add(tables[1].get_rows(ys))
        for block in self.blocks:
            x = self._block(x, block, xs, ys, flash)
        height, width = grid
        planes = x.transpose().cont().reshape(1, c.embd, height, width)     # (1, D, H, W)
        pooled = planes.pool_2d("avg", (self.pool, self.pool))              # (1, D, h, w)
        rows = pooled.shape[2] * pooled.shape[3]
        x = pooled.reshape(c.embd, rows).transpose().cont().scale(math.sqrt(c.embd))
        if self.std_bias is not None and self.std_scale is not None:
            x = x.sub(self.std_bias).mul(self.std_scale)
        return self.input_projection.mul_mat(x.rms_norm(c.eps))              # (rows, E)

    def _block(self, x, block: Gemma4VisionBlock, xs, ys, flash: bool):
        c, n = self.config, x.shape[0]
        d, eps = c.head_dim, c.eps
        h = x.rms_norm(eps).mul(block.ln1)
        q = clamped_linear(block, "attn_q", h).reshape(n, c.heads, d)         # (P, H, d)
        k = clamped_linear(block, "attn_k", h).reshape(n, c.heads, d)
        v = clamped_linear(block, "attn_v", h).reshape(n, c.heads, d).rms_norm(eps)
        q = rope_halves(q.rms_norm(eps).mul(block.attn_q_norm), xs, ys, "neox", ROPE_BASE)
        k = rope_halves(k.rms_norm(eps).mul(block.attn_k_norm), xs, ys, "neox", ROPE_BASE)
        a = attend_all(q, k, v, 1.0, flash)                                   # (P, D)
        a = clamped_linear(block, "attn_out", a).rms_norm(eps).mul(block.attn_post_norm)
        x = x.add(a)
        h = x.rms_norm(eps).mul(block.ln2)
        gated = clamped_linear(block, "ffn_gate", h).geglu(clamped_linear(block, "ffn_up", h))
        f = clamped_linear(block, "ffn_down", gated).rms_norm(eps).mul(block.ffn_post_norm)
        return x.add(f)
