"""Pixtral's vision (Mistral Small 3.1/3.2, Magistral, Devstral with images): the image keeps
its aspect ratio, shrunk (bicubic) so its longest side is at most image_size and each side a
multiple of patch x merge; a bias-free patch embedding, an RMSNorm, blocks of RMSNorms around
attention and a gated MLP with 2-D RoPE (the first half of each head rotated by the patch's
row at the even frequencies, the second by its column at the odd ones); then an RMSNorm, the
patch merger (each merge x merge cell's features, channel-major as torch's unfold lays them,
mapped to one), and two linears with a GELU between. After each row of merged cells but the
last comes the text model's [IMG_BREAK] embedding (stored in the file as
v.token_embd.img_break); [IMG_END] follows the image in the text.

Tensor names are llama.cpp's (pixtral mmproj). Q and K rows are stored as llama.cpp's
converter writes them: each head's rotated pairs adjacent, so the rotation is ggml's normal
one on each half of the head. Ollama's single files (ollama.py) keep the reference's rows
(pairs split into halves: the activations are interleaved instead) and no [IMG_BREAK] row
but the text model's whole table (the row is looked up in the graph).
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
from ..base import Block, Metadata, ModelError, Weights, weight
from .ollama import HALVES, IMG_BREAK_TOKEN
from .vit import (ACTIVATIONS, ViTConfig, as_f32, attend_all, embed_patches, patchify,
                  rope_halves)

if TYPE_CHECKING:
    from pyggml import Tensor

VISION = gguf.Keys.ClipVision
ROPE_BASE = 10000.0                     # llama.cpp's pixtral reads no other
DEFAULT_MERGE = 1                       # Pixtral 12B has no patch merger


@dataclass
class PixtralBlock(Block):
    ln1: Tensor = weight()
    attn_q: Tensor = weight()
    attn_k: Tensor = weight()
    attn_v: Tensor = weight()
    attn_out: Tensor = weight()
    ln2: Tensor = weight()
    ffn_gate: Tensor = weight()
    ffn_up: Tensor = weight()
    ffn_down: Tensor = weight()


def fitted_size(height: int, width: int, longest: int, cell: int) -> tuple[int, int]:
    """The reference processor's size: shrunk (never grown) to fit longest on both sides
    (each side floored), then rounded up to whole cells."""
    ratio = max(height / longest, width / longest)
    if ratio > 1:
        height, width = int(math.floor(height / ratio)), int(math.floor(width / ratio))
    return ((height - 1) // cell + 1) * cell, ((width - 1) // cell + 1) * cell


@register_projector("pixtral")
class PixtralVision:
    layout = Layout(after=["[IMG_END]"])

    def __init__(self, config: ViTConfig, merge: int, weights: Weights, halves: bool = False,
                 break_token: int | None = None):
        c = self.config = config
        self.merge, self.halves, self.break_token = merge, halves, break_token
        self.patch_embd = weights.take("v.patch_embd.weight", (c.embd, 3, c.patch, c.patch))
        self.pre_ln = weights.take("v.pre_ln.weight", (c.embd,))
        self.blocks = []
        for i in range(c.layers):
            block = PixtralBlock()
            weights.bind(block, f"v.blk.{i}.", {
                "ln1": (c.embd,), "attn_q": (c.embd, c.embd), "attn_k": (c.embd, c.embd),
                "attn_v": (c.embd, c.embd), "attn_out": (c.embd, c.embd), "ln2": (c.embd,),
                "ffn_gate": (c.ffn, c.embd), "ffn_up": (c.ffn, c.embd),
                "ffn_down": (c.embd, c.ffn)})
            self.blocks.append(block)
        self.input_norm = weights.optional("mm.input_norm.weight", (c.embd,))
        cells = merge * merge * c.embd
        self.patch_merger = weights.take("mm.patch_merger.weight", (c.embd, cells)) \
            if merge > 1 else None
        hidden = weights.take("mm.1.weight").shape[0]
        self.mm_1 = weights.take("mm.1.weight", (hidden, c.embd))
        self.mm_1_b = weights.optional("mm.1.bias", (hidden,))
        self.mm_2 = weights.take("mm.2.weight", (c.projection, hidden))
        self.mm_2_b = weights.optional("mm.2.bias", (c.projection,))
        self.img_break = weights.take("v.token_embd.img_break")      # (E,), or the table
        wanted = (c.projection,) if break_token is None else (self.img_break.shape[0],
                                                                c.projection)
        if self.img_break.shape != wanted:
            raise ModelError(f"v.token_embd.img_break has shape {self.img_break.shape}, not "
                             f"{wanted}.")

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights) -> "PixtralVision":
        m = Metadata(meta, "clip")
        config = ViTConfig.from_metadata(meta)
        if config.head_dim % 4:
            raise ModelError(f"A head of {config.head_dim} cannot be split into two rotated "
                             "halves of pairs.")
        token = m.get(IMG_BREAK_TOKEN)
        return cls(config, int(m.get(VISION.SPATIAL_MERGE_SIZE, DEFAULT_MERGE)), weights,
                   bool(m.get(HALVES, False)), None if token is None else int(token))

    @property
    def max_rows(self) -> int:
        cells = self.config.image_size // (self.config.patch * self.merge)
        return cells * cells + cells - 1

    def preprocess(self, image) -> Pixels:
        c, m = self.config, self.merge
        height, width = fitted_size(image.height, image.width, c.image_size, c.patch * m)
        planes = images.pixels(images.resize(image, height, width, "bicubic"), c.mean, c.std)
        rows, cols = height // c.patch, width // c.patch
        ys, xs = np.divmod(np.arange(rows * cols), cols)
        cell_rows, cell_cols = rows // m, cols // m
        inputs = {"positions": np.stack([ys, xs]).astype(np.int32)}
        if self.break_token is not None:
            inputs["break_token"] = np.array([self.break_token], np.int32)
        return Pixels(patchify(planes, c.patch), (rows, cols),
                      cell_rows * cell_cols + cell_rows - 1, inputs)

    def largest(self) -> Pixels:
        side = self.config.image_size
        return self.preprocess(images.blank(side, side))

    def forward(self, patches, grid: tuple[int, int], positions, break_token=None,
                flash: bool = False):
        """patches (P, 3*p*p), positions int32 (2, P) rows and columns, break_token int32
        (1,) where the break row is looked up in a table -> (rows, text embd)."""
        c = self.config
        n = patches.shape[0]
        ys = positions.view((n,))                                             # (P,)
        xs = positions.view((n,), offset=positions.strides[0])
        x = embed_patches(patches, self.patch_embd, c)                        # (P, D)
        x = x.rms_norm(c.eps).mul(self.pre_ln)
        for block in self.blocks:
            x = self._block(x, block, ys, xs, flash)
        if self.input_norm is not None:
            x = x.rms_norm(c.eps).mul(self.input_norm)
        height, width = grid
        if self.patch_merger is not None:
            x = self._merge(x, height, width)                                 # (L, D)
        h = self.mm_1.mul_mat(x)
        h = (h.add(self.mm_1_b) if self.mm_1_b is not None else h).gelu_erf()
        x = self.mm_2.mul_mat(h)
        x = x.add(self.mm_2_b) if self.mm_2_b is not None else x              # (L, E)
        return self._with_breaks(x, height // self.merge, width // self.merge, break_token)

    def _merge(self, x, height: int, width: int):
        """(P, D) in row-major patch order -> (L, D): each m x m cell's features laid out
        (channel, row in cell, column in cell), as torch's unfold, through the merger."""
        m, d = self.merge, self.config.embd
        assert self.patch_merger is not None                 # bound where merge > 1
        cells = (height // m) * (width // m)
        x = x.reshape(height // m, m, width // m, m * d).permute(0, 2, 1, 3).cont()
        x = x.reshape(cells, m * m, d).permute(0, 2, 1).cont()                # (L, D, m*m)
        return self.patch_merger.mul_mat(x.reshape(cells, d * m * m))         # (L, D)

    def _with_breaks(self, x, rows: int, cols: int, break_token=None):
        """(rows*cols, E) -> (rows*(cols+1) - 1, E): the break embedding after each row."""
        e = x.shape[1]
        row = x.context.bind(self.img_break).get_rows(break_token) \
            if break_token is not None else as_f32(self.img_break, x.context)
        br = row.reshape(1, 1, e).repeat(rows, 1, e)
        x = x.reshape(rows, cols, e).concat(br, 1).reshape(rows * (cols + 1), e)
        return x.view((rows * (cols + 1) - 1, e))

    def _block(self, x, block: PixtralBlock, ys, xs, flash: bool):
        c, n = self.config, x.shape[0]
        h = x.rms_norm(c.eps).mul(block.ln1)
        q = self._rope(self._heads(block.attn_q.mul_mat(h)), ys, xs)
        k = self._rope(self._heads(block.attn_k.mul_mat(h)), ys, xs)
        v = block.attn_v.mul_mat(h).reshape(n, c.heads, c.head_dim)
        a = attend_all(q, k, v, 1.0 / math.sqrt(c.head_dim), flash)           # (P, D)
        x = x.add(block.attn_out.mul_mat(a))
        h = x.rms_norm(c.eps).mul(block.ln2)
        gate = getattr(block.ffn_gate.mul_mat(h), ACTIVATIONS[c.activation])()
        return x.add(block.ffn_down.mul_mat(gate.mul(block.ffn_up.mul_mat(h))))

    def _heads(self, x):
        """(P, D) -> (P, H, d), each head's rotated pairs adjacent."""
        c, n = self.config, x.shape[0]
        if not self.halves:
            return x.reshape(n, c.heads, c.head_dim)
        half = c.head_dim // 2
        return x.reshape(n, c.heads, 2, half).permute(0, 1, 3, 2).cont() \
            .reshape(n, c.heads, c.head_dim)

    def _rope(self, x, ys, xs):
        """x (P, H, d): the first half's adjacent pairs rotated by row at the even
        frequencies of the whole head, the second half's by column at the odd ones."""
        return rope_halves(x, ys, xs, "normal", ROPE_BASE, ROPE_BASE ** (-2.0 / x.shape[-1]))
