"""Gemma 3's vision: a SigLIP tower on a square image, then its projector: a k x k average
pool of the patch grid (64 x 64 patches to 16 x 16 rows in the real model), Gemma's RMSNorm
(its 1 + weight stored as the sum, as llama.cpp's converter writes it), and the projection
into the text model's width (stored as Hugging Face holds it, (vision, text), so read
transposed, as llama.cpp reads it).
"""

from __future__ import annotations

import gguf

from ..contract import register_projector
from .pixels import Layout, Pixels
from . import images
from ..base import Metadata, ModelError, Weights
from .vit import (ViTConfig, as_f32, bind_blocks, embed_patches, encoder_block, layer_norm,
                  patch_matrix, square_pixels)

DEFAULT_POOL = 4          # clip.vision.projector.scale_factor when absent, as llama.cpp


@register_projector("gemma3")
class Gemma3Vision:
    layout = Layout(before=["\n\n", "<start_of_image>"], after=["<end_of_image>", "\n\n"],
                    bidirectional=True)

    def __init__(self, config: ViTConfig, pool: int, weights: Weights):
        c = self.config = config
        self.pool = pool
        side = c.image_size // c.patch
        if side % pool:
            raise ModelError(f"A {side} x {side} patch grid does not pool by {pool}.")
        self.patch_embd = patch_matrix(weights, c)
        self.patch_embd_b = weights.take("v.patch_embd.bias", (c.embd,))
        self.position_embd = weights.take("v.position_embd.weight", (side * side, c.embd))
        self.blocks = bind_blocks(weights, c, c.layers)
        self.post_ln = weights.take("v.post_ln.weight", (c.embd,))
        self.post_ln_b = weights.take("v.post_ln.bias", (c.embd,))
        self.soft_emb_norm = weights.take("mm.soft_emb_norm.weight", (c.embd,))
        self.input_projection = weights.take("mm.input_projection.weight",
                                             (c.embd, c.projection))

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights) -> "Gemma3Vision":
        pool = Metadata(meta, "clip").get(gguf.Keys.ClipVision.Projector.SCALE_FACTOR,
                                          DEFAULT_POOL)
        return cls(ViTConfig.from_metadata(meta), int(pool), weights)

    @property
    def max_rows(self) -> int:
        side = self.config.image_size // self.config.patch // self.pool
        return side * side

    def preprocess(self, image) -> Pixels:
        """Squashed to image_size x image_size (bilinear), normalized, cut into patches."""
        c = self.config
        planes = images.pixels(images.resize(image, c.image_size, c.image_size, "bilinear"),
                               c.mean, c.std)                               # (3, S, S)
        return square_pixels(planes, c, self.max_rows)

    def largest(self) -> Pixels:
        """Every image is squashed to one size: that one."""
        return self.preprocess(images.blank(self.config.image_size, self.config.image_size))

    def forward(self, patches, grid: tuple[int, int], flash: bool = False):
        """patches (P, 3*p*p) -> (rows, text embd)."""
        c = self.config
        height, width = grid
        x = embed_patches(patches, self.patch_embd, c).add(self.patch_embd_b)    # (P, D)
        x = x.add(as_f32(self.position_embd, patches.context))
        for block in self.blocks:
            x = encoder_block(x, block, c, flash)
        x = layer_norm(x, self.post_ln, self.post_ln_b, c.eps)
        grid_planes = x.transpose().cont().reshape(1, c.embd, height, width)     # (1, D, H, W)
        pooled = grid_planes.pool_2d("avg", (self.pool, self.pool))            # (1, D, h, w)
        rows = pooled.shape[2] * pooled.shape[3]
        x = pooled.reshape(c.embd, rows).transpose().cont()                    # (rows, D)
        x = x.rms_norm(c.eps).mul(self.soft_emb_norm)
        projection = patches.context.bind(self.input_projection).transpose().cont()  # (E, D)
        return projection.mul_mat(x)                                           # (rows, E)
