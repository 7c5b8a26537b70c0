"""RoPE in numpy from the formulas (RoFormer's rotation, YaRN's ramp): the rope tests' reference."""

from __future__ import annotations

import math

import numpy as np


def yarn_corr_dims(n_dims, n_ctx_orig, base, beta_fast, beta_slow):
    def corr_dim(n_rot):
        return n_dims * math.log(n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(base))
    return max(0, math.floor(corr_dim(beta_fast))), min(n_dims - 1, math.ceil(corr_dim(beta_slow)))


def rope_reference(x, pos, n_dims, base, neox, freq_scale=1.0, freq_factors=None,
                   ext_factor=0.0, attn_factor=1.0, n_ctx_orig=0, beta_fast=32.0, beta_slow=1.0):
    """x (T, H, D), pos (T,): RoPE as in the RoFormer paper, with YaRN (Peng et al. 2023)."""
    half = n_dims // 2
    i = np.arange(half)
    theta_extrap = pos[:, None].astype(np.float64) * base ** (-2.0 * i / n_dims)[None, :]
    if freq_factors is not None:
        theta_extrap = theta_extrap / freq_factors[None, :]
    theta = freq_scale * theta_extrap
    mscale = attn_factor
    if ext_factor:
        low, high = yarn_corr_dims(n_dims, n_ctx_orig, base, beta_fast, beta_slow)
        ramp = (1 - np.clip((i - low) / max(0.001, high - low), 0, 1)) * ext_factor
        theta = theta * (1 - ramp) + theta_extrap * ramp
        mscale *= 1 + 0.1 * math.log(1 / freq_scale)
    cos, sin = (np.cos(theta) * mscale)[:, None, :], (np.sin(theta) * mscale)[:, None, :]
    out = x.astype(np.float64).copy()
    first, second = (np.s_[..., :half], np.s_[..., half:n_dims]) if neox else \
        (np.s_[..., 0:n_dims:2], np.s_[..., 1:n_dims:2])
    a, b = x[first].astype(np.float64), x[second].astype(np.float64)
    out[first], out[second] = a * cos - b * sin, a * sin + b * cos
    return out
