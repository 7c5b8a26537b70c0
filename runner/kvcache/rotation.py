"""Walsh-Hadamard rotation of quantized caches, as llama.cpp rotates them (its attn_rot).

Keys and values are rotated before they are quantized into the cache, the queries by the
keys' rotation (which leaves every score as it was: the rotation is orthonormal), and the
attention's output rotated back by the values' (the rotation is its own inverse). Rotating
spreads an outlier over a whole run of 64 or more values, so block quantization (q8_0,
q4_0) loses less of the rest. llama.cpp does it for every quantized cache whose head size
is a multiple of 64 (`LLAMA_ATTN_ROT_DISABLE=1` turns it off there), and the same logits
need the same rotation here. ggml's CPU computes each rotation as a fast transform.
"""

from __future__ import annotations

import functools

import pyggml

QUANTIZED = ("q8_0", "q4_0")
RUN = 64                    # the smallest rotation, and the values' (llama.cpp found it best)


def key_rotation(cache_type: str, head_dim: int) -> int | None:
    """The side of the rotation of a layer's keys and queries: the largest power of two
    that divides the head size; None where nothing rotates."""
    if cache_type not in QUANTIZED or head_dim % RUN:
        return None
    return head_dim & -head_dim


def value_rotation(cache_type: str, v_dim: int) -> int | None:
    return RUN if cache_type in QUANTIZED and v_dim % RUN == 0 else None


class Rotations:
    """One graph's rotation matrices, inputs shared by every layer that rotates by the same
    side (filled from host memory at each launch, as llama.cpp fills its own)."""

    def __init__(self, ctx: pyggml.Context, sides):
        self.matrices = {n: ctx.new_tensor("F32", (n, n), name=f"hadamard_{n}").set_input()
                         for n in sorted(set(sides) - {None})}

    def rotate(self, x, side: int | None):
        """x (..., D) rotated in runs of side (None: x as it is)."""
        return x if side is None else x.hadamard(self.matrices[side])

    def inputs(self) -> list[tuple]:
        """(input, its float32 matrix) pairs to fill."""
        return [(tensor, _matrix(n)) for n, tensor in self.matrices.items()]


@functools.cache
def _matrix(n: int):
    return pyggml.walsh_hadamard(n)
