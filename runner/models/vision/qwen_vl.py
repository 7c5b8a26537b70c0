"""Qwen2-VL's and Qwen2.5-VL's vision (qwen2vl_merger, qwen2.5vl_merger; Qwen2.5-VL also
serves Ollama's qwen25vl files, read through ollama.py).

The image keeps its aspect ratio, resized (bicubic) so each side is a multiple of patch x
merge and its area lies between the processor's min and max pixels (transformers'
smart_resize); each patch of 14 is read as a temporal pair of one frame (the Conv3D's two
time slices are two kernels, v.patch_embd.weight and .weight.1, summed over the same
pixels, as llama.cpp splits them). Patches come in merge order: each merge x merge cell's
patches together, cells row-major, as the reference processor lays them out.

Blocks: a norm (Qwen2.5-VL: RMSNorm; Qwen2-VL: LayerNorm), attention with 2-D rope (ggml's
vision rope: the first half of each head's pairs turned by the patch's row, the second by
its column), a norm, an MLP (Qwen2.5-VL: SwiGLU with biases; Qwen2-VL: quick GELU). In
Qwen2.5-VL the patches attend within windows of window_size pixels (of merged cells), except
every n_wa_pattern-th block, which sees the whole image; the reference reorders the patches
window by window, this mask leaves them in place (the same sums). Then the merger: a norm,
each cell's patches side by side, two linears with an exact GELU between.

In the text, the rows stand between <|vision_start|> and <|vision_end|>, causal as text,
and place themselves in 2-D through M-RoPE (Pixels.spots, multimodal/axes.py).
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
from .vit import ACTIVATIONS, ViTConfig, attend_all, layer_norm

if TYPE_CHECKING:
    from pyggml import Tensor

VISION = gguf.Keys.ClipVision
ROPE_BASE, ROPE_CONTEXT = 10000.0, 32768          # the vision rope's, as llama.cpp's
DEFAULT_MERGE = 2
DEFAULT_WINDOW = 112                    # Qwen2.5-VL's window_size, in pixels
MIN_CELLS = 4                           # the reference processor's least area, in cells
# the most: 1280 merged cells an image, the model card's suggested max_pixels (the reference
# processor allows 16384, Ollama 2675, llama.cpp 4096, whose full-attention blocks need
# gigabytes of scores); a file's clip.vision.image_max_pixels says otherwise
MAX_CELLS = 1280
MASKED = -1e30                          # a score outside the window (-inf once in F16)
# ours: the blocks that see the whole image, listed (Ollama's files list them; llama.cpp's
# say every n_wa_pattern-th)
FULL_BLOCKS = "clip.vision.fullatt_block_indexes"


@dataclass
class QwenVisionBlock(Block):
    ln1: Tensor = weight()
    ln1_b: Tensor | None = None
    attn_qkv: Tensor | None = None          # Qwen3-VL's: Q, K and V in one (3D, D)
    attn_qkv_b: Tensor | None = None
    attn_q: Tensor | None = None
    attn_q_b: Tensor | None = None
    attn_k: Tensor | None = None
    attn_k_b: Tensor | None = None
    attn_v: Tensor | None = None
    attn_v_b: Tensor | None = None
    attn_out: Tensor = weight()
    attn_out_b: Tensor | None = None
    ln2: Tensor = weight()
    ln2_b: Tensor | None = None
    ffn_gate: Tensor | None = None
    ffn_gate_b: Tensor | None = None
    ffn_up: Tensor = weight()
    ffn_up_b: Tensor | None = None
    ffn_down: Tensor = weight()
    ffn_down_b: Tensor | None = None


def smart_size(height: int, width: int, factor: int, min_pixels: int,
               max_pixels: int) -> tuple[int, int]:
    """transformers' smart_resize: the sides rounded to multiples of factor, scaled (keeping
    the aspect ratio) into [min_pixels, max_pixels]."""
    if max(height, width) / min(height, width) > 200:
        raise images.ImageError(f"An image of {width}x{height} pixels is too elongated for "
                                "this model (an aspect ratio of at most 200).")
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h, w


def merge_order(rows: int, cols: int, merge: int) -> np.ndarray:
    """The row-major patch index of each patch in merge order (cells row-major, each cell's
    patches row-major within it)."""
    grid = np.arange(rows * cols).reshape(rows // merge, merge, cols // merge, merge)
    return grid.transpose(0, 2, 1, 3).ravel()


@register_projector("qwen2vl_merger")
@register_projector("qwen2.5vl_merger")
class QwenVision:
    layout = Layout(before=["<|vision_start|>"], after=["<|vision_end|>"])

    def __init__(self, config: ViTConfig, weights: Weights, merge: int = DEFAULT_MERGE,
                 window: int = DEFAULT_WINDOW, full_blocks=None,
                 pixels: tuple[int, int] | None = None):
        """full_blocks: the blocks that see the whole image (None: all, no windows); pixels:
        the least and most pixels of a resized image (None: MIN_CELLS and MAX_CELLS)."""
        c = self.config = config
        self.merge, self.window = merge, window
        self.full_blocks = None if full_blocks is None else frozenset(full_blocks)
        self.min_pixels, self.max_pixels = pixels or default_pixels(c.patch, merge)
        kernel = (c.embd, 3, c.patch, c.patch)
        if "v.patch_embd.weight.1" in weights.tensors:      # llama.cpp's: a kernel a frame
            self.patch_embd = [weights.take("v.patch_embd.weight", kernel),
                               weights.take("v.patch_embd.weight.1", kernel)]
        else:               # Ollama's Qwen3-VL: the Conv3D whole, (D, 3, 2, p, p) as (3D, 2, p, p)
            self.patch_embd = [weights.take("v.patch_embd.weight",
                                            (3 * c.embd, 2, c.patch, c.patch))]
        self.blocks = [self._bind_block(weights, i) for i in range(c.layers)]
        cell = c.embd * merge * merge
        self.post_ln = weights.take("v.post_ln.weight", (c.embd,))
        self.post_ln_b = weights.optional("v.post_ln.bias", (c.embd,))
        self.mm_0 = weights.take("mm.0.weight", (cell, cell))
        self.mm_0_b = weights.take("mm.0.bias", (cell,))
        self.mm_2 = weights.take("mm.2.weight", (c.projection, cell))
        self.mm_2_b = weights.take("mm.2.bias", (c.projection,))

    def _bind_block(self, weights: Weights, i: int) -> QwenVisionBlock:
        c, prefix = self.config, f"v.blk.{i}."
        e, f = c.embd, c.ffn
        projections = {"attn_qkv": (3 * e, e)} if f"{prefix}attn_qkv.weight" in weights.tensors \
            else {"attn_q": (e, e), "attn_k": (e, e), "attn_v": (e, e)}
        shapes = {"ln1": (e,), **projections, "attn_out": (e, e), "ln2": (e,),
                  "ffn_gate": (f, e), "ffn_up": (f, e), "ffn_down": (e, f)}
        block = QwenVisionBlock()
        for name, shape in shapes.items():
            take = weights.optional if name == "ffn_gate" else weights.take  # Qwen2-VL: none
            setattr(block, name, take(f"{prefix}{name}.weight", shape))
            setattr(block, f"{name}_b", weights.optional(f"{prefix}{name}.bias", shape[:1]))
        return block

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights) -> "QwenVision":
        m, config = Metadata(meta, "clip"), tower_config(meta, weights)
        if config.head_dim % 4:
            raise ModelError(f"A head of {config.head_dim} cannot be split into row and "
                             "column halves of pairs.")
        full, pattern = m.get(FULL_BLOCKS), int(m.get(VISION.N_WA_PATTERN, 0))
        if full is None and pattern:
            full = [i for i in range(config.layers) if (i + 1) % pattern == 0]
        merge = int(m.get(VISION.SPATIAL_MERGE_SIZE, DEFAULT_MERGE))
        return cls(config, weights, merge, int(m.get(VISION.WINDOW_SIZE, DEFAULT_WINDOW)),
                   None if full is None else [int(i) for i in full], file_pixels(m, config, merge))

    @property
    def cell(self) -> int:
        """A merged cell's side in pixels."""
        return self.config.patch * self.merge

    @property
    def max_rows(self) -> int:
        return self.max_pixels // (self.cell * self.cell)

    def preprocess(self, image) -> Pixels:
        c, m = self.config, self.merge
        height, width = smart_size(image.height, image.width, self.cell, self.min_pixels,
                                   self.max_pixels)
        planes = images.pixels(images.resize(image, height, width, "bicubic"), c.mean, c.std)
        rows, cols = height // c.patch, width // c.patch
        order = merge_order(rows, cols, m)
        patches = planes.reshape(3, rows, c.patch, cols, c.patch).transpose(1, 3, 0, 2, 4) \
            .reshape(rows * cols, 3 * c.patch * c.patch)[order]
        ys, xs = np.divmod(order, cols)
        inputs = {"positions": np.concatenate([ys, xs, ys, xs]).astype(np.int32)}
        if self.full_blocks is not None:
            span = max(1, self.window // self.cell)           # cells a window's side holds
            windows = (ys // m // span) * -(-(cols // m) // span) + xs // m // span
            inputs["windows"] = windows.astype(np.float32)
        cells = (rows // m) * (cols // m)
        spots = np.stack(np.divmod(np.arange(cells), cols // m), axis=1).astype(np.int32)
        return Pixels(np.ascontiguousarray(patches), (rows, cols), cells, inputs, spots)

    def largest(self) -> Pixels:
        """The image of the most cells (the widest factor pair of max_rows)."""
        cells = self.max_rows
        rows = max(d for d in range(1, math.isqrt(cells) + 1) if cells % d == 0)
        return self.preprocess(images.blank(cells // rows * self.cell, rows * self.cell))

    def forward(self, patches, grid: tuple[int, int], positions, windows=None,
                flash: bool = False):
        """patches (P, 3*p*p) in merge order, positions int32 (4 * P,) rows, columns, rows,
        columns, windows float32 (P,) each patch's window -> (P / merge^2, text embd)."""
        n = patches.shape[0]
        x = self._embed(patches)                                              # (P, D)
        mask = None
        if windows is not None:
            across = windows.reshape(1, n).repeat(n, n).sub(windows.reshape(n, 1))  # (P, P)
            mask = across.sqr().clamp(0.0, 1.0).scale(MASKED)
            if flash:
                mask = mask.cast("F16")
        for i, block in enumerate(self.blocks):
            whole = self.full_blocks is None or i in self.full_blocks
            x = self._block(x, block, positions, None if whole else mask, flash)
        return self._merged(x)                                                # (L, E)

    def _embed(self, patches):
        """patches (P, 3*p*p) -> (P, D): the temporal pair's two kernels, summed."""
        c, ctx = self.config, patches.context
        if len(self.patch_embd) == 1:      # the whole Conv3D: each patch as both frames
            n, area = patches.shape[0], c.patch * c.patch
            frames = patches.reshape(n, 3, 1, area).repeat(n, 3, 2, area) \
                .reshape(n, 6 * area)                                         # (P, 3*2*p*p)
            return ctx.bind(self.patch_embd[0]).reshape(c.embd, 6 * area).mul_mat(frames)
        x = None
        for kernel in self.patch_embd:
            matrix = ctx.bind(kernel).reshape(c.embd, 3 * c.patch * c.patch)
            product = matrix.mul_mat(patches)                                 # (P, D)
            x = product if x is None else x.add(product)
        return x

    def _merged(self, x):
        """x (P, D), the last block's -> (P / merge^2, E): the merger."""
        c, cell = self.config, self.merge * self.merge
        x = self._norm(x, self.post_ln, self.post_ln_b).reshape(x.shape[0] // cell, c.embd * cell)
        h = self.mm_0.mul_mat(x).add(self.mm_0_b).gelu_erf()
        return self.mm_2.mul_mat(h).add(self.mm_2_b)

    def _norm(self, x, weight, bias):
        """LayerNorm where the file has a bias (Qwen2-VL), else RMSNorm (Qwen2.5-VL)."""
        eps = self.config.eps
        return layer_norm(x, weight, bias, eps) if bias is not None else \
            x.rms_norm(eps).mul(weight)

    def _block(self, x, block: QwenVisionBlock, positions, mask, flash: bool):
        c = self.config
        h = self._norm(x, block.ln1, block.ln1_b)
        q, k, v = self._qkv(block, h)                                         # (P, H, Dh)
        q, k = (t.rope_multi(positions, c.head_dim // 2, [c.head_dim // 4] * 4, "vision",
                             freq_base=ROPE_BASE, n_ctx_orig=ROPE_CONTEXT) for t in (q, k))
        a = attend_all(q, k, v, 1.0 / math.sqrt(c.head_dim), flash, mask)       # (P, D)
        x = x.add(linear(block.attn_out, block.attn_out_b, a))
        h = self._norm(x, block.ln2, block.ln2_b)
        up = linear(block.ffn_up, block.ffn_up_b, h)
        if block.ffn_gate is not None:                                        # SwiGLU
            up = linear(block.ffn_gate, block.ffn_gate_b, h).silu().mul(up)
        else:
            up = getattr(up, ACTIVATIONS[c.activation])()
        return x.add(linear(block.ffn_down, block.ffn_down_b, up))


    def _qkv(self, block: QwenVisionBlock, h):
        """h (P, D) -> queries, keys and values (P, H, Dh), from one product or three."""
        c, n = self.config, h.shape[0]
        if block.attn_qkv is None:
            return tuple(linear(w, b, h).reshape(n, c.heads, c.head_dim) for w, b in (
                (block.attn_q, block.attn_q_b), (block.attn_k, block.attn_k_b),
                (block.attn_v, block.attn_v_b)))
        qkv = linear(block.attn_qkv, block.attn_qkv_b, h)                     # (P, 3D)
        row, item = qkv.strides
        return tuple(qkv.view((n, c.heads, c.head_dim), part * c.embd * item,
                              (row, c.head_dim * item, item)).cont() for part in range(3))


def default_pixels(patch: int, merge: int) -> tuple[int, int]:
    """The least and most pixels of a resized image, MIN_CELLS and MAX_CELLS cells."""
    area = (patch * merge) ** 2
    return MIN_CELLS * area, MAX_CELLS * area


def tower_config(meta: dict, weights: Weights) -> ViTConfig:
    """The tower's sizes; the feed-forward size from its tensors where the file does not say
    it (Ollama's do not)."""
    if VISION.FEED_FORWARD_LENGTH not in meta:
        ffn = weights.tensors.get("v.blk.0.ffn_up.weight")
        if ffn is not None:
            meta = dict(meta, **{VISION.FEED_FORWARD_LENGTH: ffn.shape[0]})
    return ViTConfig.from_metadata(meta)


def file_pixels(m: Metadata, config: ViTConfig, merge: int) -> tuple[int, int]:
    """The file's clip.vision.image_min/max_pixels, each defaulting as default_pixels."""
    least, most = default_pixels(config.patch, merge)
    return (int(m.get(VISION.IMAGE_MIN_PIXELS, least)),
            int(m.get(VISION.IMAGE_MAX_PIXELS, most)))


def linear(weight, bias, x):
    """x (T, in) -> (T, out), the bias added where there is one."""
    y = weight.mul_mat(x)
    return y if bias is None else y.add(bias)
