"""Gemma 4 12B's ("unified") vision, as llama.cpp's gemma4uv runs it: no transformer. The
image is sized as llama.cpp's mtmd sizes it (mtmd_sizing): each side rounded to whole 48-pixel
patches (pooling x patch pixels a side, nothing merged after), kept when that makes 70 to 1120
patches, else scaled to that range, and the image fitted onto it (bicubic, black borders); each
patch's raw pixels (0..1) go through a LayerNorm, a biased dense layer and a second LayerNorm
(eps 1e-5, as PyTorch's), gain learned x and y position embeddings (the two halves of one
table, by column and by row), a third LayerNorm, then an unweighted RMSNorm and the projection
into the text model.

Tensor names are llama.cpp's: v.patch_norm.1 over the patch's pixels in channel-first order
(as its im2col lays them out, the converter reordering the checkpoint's), v.patch_embd
(D, 3*p*p) with its bias, v.patch_norm.2, v.position_embd (2, positions, D), v.patch_norm.3
(the checkpoint's pos_norm), mm.input_projection.
"""

from __future__ import annotations

from dataclasses import dataclass

import gguf
import numpy as np

from ..base import Metadata, ModelError, Weights
from ..contract import register_projector
from . import images
from .mtmd_sizing import cell_size, letterboxed
from .pixels import Layout, Pixels
from .vit import layer_norm, patchify

VISION = gguf.Keys.ClipVision
LAYER_NORM_EPS = 1e-5           # PyTorch's LayerNorm default, which llama.cpp's graph fixes
DEFAULT_POOL = 3                # llama.cpp's n_merge when the file does not say
MIN_TOKENS, MAX_TOKENS = 70, 1120   # llama.cpp's range for gemma4uv (and the table's size)
LARGEST_GRID = (28, 40)         # rows x columns: MAX_TOKENS patches


@dataclass(frozen=True)
class UnifiedVisionConfig:
    patch: int                   # pixels a side of a patch (the pool's already)
    embd: int
    projection: int              # the text model's embedding width
    eps: float                   # of the RMSNorm before the projection


@register_projector("gemma4uv")
class Gemma4UnifiedVision:
    layout = Layout(before=["<|image>"], after=["<image|>"], bidirectional=True)

    def __init__(self, patch: int, embd: int, projection: int, eps: float, weights: Weights):
        self.config = UnifiedVisionConfig(patch, embd, projection, eps)
        self.patch, self.eps = patch, eps
        pixels = 3 * patch * patch
        self.patch_norm = [(weights.take(f"v.patch_norm.{i}.weight", (size,)),
                            weights.take(f"v.patch_norm.{i}.bias", (size,)))
                           for i, size in ((1, pixels), (2, embd), (3, embd))]
        self.patch_embd = weights.take("v.patch_embd.weight", (embd, pixels))
        self.patch_bias = weights.take("v.patch_embd.bias", (embd,))
        self.position_embd = weights.take("v.position_embd.weight")
        if self.position_embd.shape[0] != 2 or self.position_embd.shape[2] != embd:
            raise ModelError(f"v.position_embd.weight has shape {self.position_embd.shape}, "
                             f"not (2, positions, {embd}).")
        self.input_projection = weights.take("mm.input_projection.weight", (projection, embd))

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights) -> "Gemma4UnifiedVision":
        m = Metadata(meta, "clip")
        patch = int(m.require(VISION.PATCH_SIZE))
        pool = int(m.get(VISION.Projector.SCALE_FACTOR, DEFAULT_POOL))
        eps = float(m.require(VISION.Attention.LAYERNORM_EPS))
        if patch < 1 or pool < 1:
            raise ModelError(f"{VISION.PATCH_SIZE} {patch} and {VISION.Projector.SCALE_FACTOR} "
                             f"{pool} must both be positive.")
        if not 0 < eps < 1:
            raise ModelError(f"{VISION.Attention.LAYERNORM_EPS} is {eps}; expected a small "
                             "positive number.")
        return cls(patch * pool, int(m.require(VISION.EMBEDDING_LENGTH)),
                   int(m.require(VISION.PROJECTION_DIM)), eps, weights)

    @property
    def max_rows(self) -> int:
        return MAX_TOKENS

    def preprocess(self, image) -> Pixels:
        p = self.patch
        height, width = cell_size(image.height, image.width, p, MIN_TOKENS, MAX_TOKENS)
        rows, cols = height // p, width // p
        if rows * cols > MAX_TOKENS:
            raise images.ImageError(f"A {image.width}x{image.height} image is too narrow: "
                                    f"with one patch across it makes {rows * cols} patches, "
                                    f"and at most {MAX_TOKENS} are read.")
        if max(rows, cols) > self.position_embd.shape[1]:
            raise images.ImageError(f"The image makes a {cols}x{rows} patch grid; the model "
                                    f"knows positions up to {self.position_embd.shape[1]}.")
        planes = images.pixels(letterboxed(image, height, width, "bicubic"))  # (3, H, W) 0..1
        ys, xs = np.divmod(np.arange(rows * cols), cols)
        positions = np.stack([xs, ys]).astype(np.int32)                       # (2, P)
        return Pixels(patchify(planes, p), (rows, cols), rows * cols, {"positions": positions})

    def largest(self) -> Pixels:
        rows, cols = LARGEST_GRID                     # MAX_TOKENS patches, kept as they are
        return self.preprocess(images.blank(cols * self.patch, rows * self.patch))

    def forward(self, patches, grid: tuple[int, int], positions, flash: bool = False):
        """patches (P, 3*p*p) channel-first, positions int32 (2, P) x and y -> (P, text E)."""
        ctx, n, eps = patches.context, patches.shape[0], LAYER_NORM_EPS
        (w1, b1), (w2, b2), (w3, b3) = self.patch_norm
        xs = positions.view((n,))                                             # (P,)
        ys = positions.view((n,), offset=positions.strides[0])
        table = ctx.bind(self.position_embd)                                  # (2, T, D)
        tables = [table.view(table.shape[1:], offset=i * table.strides[0]) for i in (0, 1)]
        x = layer_norm(patches, w1, b1, eps)                                  # (P, 3*p*p)
        x = layer_norm(self.patch_embd.mul_mat(x).add(self.patch_bias), w2, b2, eps)  # (P, D)
        x = x.add(tables[0].get_rows(xs)).add(tables[1].get_rows(ys))
        x = layer_norm(x, w3, b3, eps)
        return self.input_projection.mul_mat(x.rms_norm(self.eps))            # (P, E)
