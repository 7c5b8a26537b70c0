"""Gemma 4's ClippableLinear: a linear whose input and output are optionally clamped, the
bounds stored as scalar tensors <linear>.input_min/.input_max/.output_min/.output_max beside
its weight (llama.cpp's names). Absent bounds are infinite.
"""

from __future__ import annotations

import math

from .base import Layer, Weights

CLAMPS = ("input_min", "input_max", "output_min", "output_max")


def bind_clamps(block: Layer, weights: Weights, prefix: str, linears) -> None:
    """block.clamps: each linear's four bound tensors (None where absent)."""
    block.clamps = {name: [weights.optional(f"{prefix}{name}.{kind}") for kind in CLAMPS]
                    for name in linears}


def clamped_linear(block: Layer, name: str, x):
    """block.<name> applied to x, clamped where its bounds say."""
    lo_in, hi_in, lo_out, hi_out = _limits(block)[name]
    if math.isfinite(lo_in) or math.isfinite(hi_in):
        x = x.clamp(lo_in, hi_in)
    out = getattr(block, name).mul_mat(x)
    if math.isfinite(lo_out) or math.isfinite(hi_out):
        out = out.clamp(lo_out, hi_out)
    return out


def _limits(block: Layer) -> dict:
    """Each linear's bounds as floats, +-inf where absent (read once the weights are
    loaded)."""
    if not hasattr(block, "limits"):
        unbounded = (-math.inf, math.inf, -math.inf, math.inf)
        block.limits = {name: tuple(default if t is None else float(t.numpy().reshape(-1)[0])
                                    for t, default in zip(tensors, unbounded))
                        for name, tensors in block.clamps.items()}
    return block.limits
