"""Gemma 4's ClippableLinear: a linear whose input and output are optionally clamped, the
bounds stored as scalar tensors <linear>.input_min/.input_max/.output_min/.output_max beside
its weight (llama.cpp's names). They are graph parameters, not tensors: read from the file as
the model binds (absent bounds are infinite), so the graph is the same measured or run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .base import Block, Weights

CLAMPS = ("input_min", "input_max", "output_min", "output_max")
UNBOUNDED = (-math.inf, math.inf, -math.inf, math.inf)


@dataclass
class ClampedBlock(Block):
    """A block with clamped linears: limits holds each one's four bounds as floats."""
    limits: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)


def bind_clamps(block: ClampedBlock, weights: Weights, prefix: str, linears) -> None:
    """block.limits of each of the linears (fields of block), read from the file."""
    block.check_declared(linears)
    for name in linears:
        values = [weights.value(f"{prefix}{name}.{kind}") for kind in CLAMPS]
        lo_in, hi_in, lo_out, hi_out = (default if value is None else float(value.reshape(-1)[0])
                                        for value, default in zip(values, UNBOUNDED))
        block.limits[name] = (lo_in, hi_in, lo_out, hi_out)


def clamped_linear(block: ClampedBlock, name: str, x):
    """block.<name> applied to x, clamped where its bounds say."""
    lo_in, hi_in, lo_out, hi_out = block.limits[name]
    if math.isfinite(lo_in) or math.isfinite(hi_in):
        x = x.clamp(lo_in, hi_in)
    out = getattr(block, name).mul_mat(x)
    if math.isfinite(lo_out) or math.isfinite(hi_out):
        out = out.clamp(lo_out, hi_out)
    return out
