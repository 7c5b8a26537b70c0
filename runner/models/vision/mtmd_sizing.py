"""llama.cpp's mtmd sizing of an image for its dynamic-size towers (mtmd-image.cpp's
calc_size_preserved_ratio and img_tool::resize with its default PAD_CEIL), in its float32
arithmetic: each side rounded to the nearest whole cell, kept if the cell count lies within
the budget, else scaled (in float32) down to at most or up to at least it; the image then
resized to fit that canvas with its aspect ratio, sides rounded up, and pasted centred on
black. The resize is llama.cpp's resize_pillow: Pillow's fixed-point filter, its width pass
always before its height pass (the Pillow installed here, 13, takes the height pass first
for a tall image, rounding its 8-bit intermediate otherwise), so here two one-axis resizes.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from . import images

f32 = np.float32


def _round_half_away(x: np.float32) -> int:
    """std::round of a non-negative float: halves away from zero."""
    whole = math.floor(x)
    return whole + 1 if x - whole >= 0.5 else whole


def cell_size(height: int, width: int, cell: int, min_cells: int,
              max_cells: int) -> tuple[int, int]:
    """(height, width), each a multiple of cell, as calc_size_preserved_ratio gives them with
    min_pixels and max_pixels of min_cells and max_cells cells."""
    min_pixels, max_pixels = min_cells * cell * cell, max_cells * cell * cell
    h = max(cell, _round_half_away(f32(height) / f32(cell)) * cell)
    w = max(cell, _round_half_away(f32(width) / f32(cell)) * cell)
    area = f32(height) * f32(width)                                     # float32, as there
    if h * w > max_pixels:
        beta = np.sqrt(area / f32(max_pixels))
        h = max(cell, math.floor(f32(height) / beta / f32(cell)) * cell)
        w = max(cell, math.floor(f32(width) / beta / f32(cell)) * cell)
    elif h * w < min_pixels:
        beta = np.sqrt(f32(min_pixels) / area)
        h = math.ceil(f32(height) * beta / f32(cell)) * cell
        w = math.ceil(f32(width) * beta / f32(cell)) * cell
    return h, w


def letterboxed(image: Image.Image, height: int, width: int, filter: str) -> Image.Image:
    """The image on a black height x width canvas: scaled by the smaller of the two side
    ratios (float32), its sides rounded up (at most the canvas's), centred (offsets floored)."""
    if (image.height, image.width) == (height, width):
        return image
    scale = min(f32(width) / f32(image.width), f32(height) / f32(image.height))
    inner_w = min(math.ceil(f32(image.width) * scale), width)
    inner_h = min(math.ceil(f32(image.height) * scale), height)
    canvas = Image.new("RGB", (width, height))
    canvas.paste(width_then_height(image, inner_h, inner_w, filter),
                 ((width - inner_w) // 2, (height - inner_h) // 2))
    return canvas


def width_then_height(image: Image.Image, height: int, width: int, filter: str) -> Image.Image:
    """Pillow's resize, its width pass first and then its height pass, as resize_pillow."""
    return images.resize(images.resize(image, image.height, width, filter), height, width, filter)
