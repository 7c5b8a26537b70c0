"""Positions in more than one dimension, for text models with M-RoPE (Qwen2-VL, Qwen2.5-VL,
Qwen3-VL): each item of a sequence gets (time, row, column, time) rope positions (the
fourth axis turns the pairs no section claims, which transformers turns by time; llama.cpp
turns an image row's by 0, which departs from it where Qwen3-VL's interleaved sections
leave pairs over).

A token at rope position r has (r, r, r, r). An image's rows all take the time r where the
image starts, and r plus their row and column in the image's grid of rows; the item after
the image continues at r + max(rows, columns) (transformers' get_rope_index, llama.cpp's
mtmd n_pos, Ollama's PostTokenize agree). So a sequence's rope positions fall behind its
cache positions (one cell per item) by what its images saved; the KV cache, its masks and
the runner's counts keep to cells, and only the rope reads these.
"""

from __future__ import annotations

import numpy as np

from ..models.rope import AXES
from .media import MediaRow


def axes(items: list, start: int, end: int, position: int) -> tuple[np.ndarray, int]:
    """The rope positions of items[start:end], int32 (AXES, end - start), given the rope
    position of items[start] (which is not inside an image), and the rope position of the
    item after them."""
    out = np.empty((AXES, end - start), np.int32)
    return out, _walk(items, start, end, position, out)


def position_at(items: list, n: int, known: tuple[int, int] = (0, 0)) -> int:
    """The rope position of items[n] (n not inside an image), walking on from known: an
    earlier (index, rope position) pair of the same items."""
    start, position = known if known[0] <= n else (0, 0)
    return _walk(items, start, n, position)


def _walk(items: list, start: int, end: int, position: int, out=None) -> int:
    """The rope position after items[start:end] (items[start] at position); each item's
    positions written into out's columns where it is given."""
    base: int | None = None                # the image being walked: its time and extent
    span = 0                               # (read only while base is set)
    for j in range(start, end):
        item = items[j]
        if type(item) is not MediaRow:
            if base is not None:
                position, base = base + span, None
            if out is not None:
                out[:, j - start] = position
            position += 1
            continue
        spots = item.media.pixels.spots
        if base is None or item.index == 0:
            if base is not None:
                position = base + span
            base, span = position, item.media.rows if spots is None else int(spots.max()) + 1
        if out is not None:
            row, col = (0, item.index) if spots is None else spots[item.index]
            out[:, j - start] = (base, base + row, base + col, base)
    return position if base is None else base + span
