"""Norms, softmax, rope (normal, neox, frequency factors, YaRN, multi-section) and flash
attention against numpy references written from the formulas."""

import math

import numpy as np
import pytest

from tests.support.rope import rope_reference

from .conftest import f32


def test_rms_norm(compute, rng):
    x = f32(rng, 3, 5, 64)
    out = compute(lambda t: t.rms_norm(1e-6), x)
    np.testing.assert_allclose(out, x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6),
                               rtol=1e-5, atol=1e-6)


def test_norm(compute, rng):
    x = f32(rng, 4, 48) + 2
    out = compute(lambda t: t.norm(1e-5), x)
    centered = x - x.mean(-1, keepdims=True)
    np.testing.assert_allclose(out, centered / np.sqrt((centered**2).mean(-1, keepdims=True)
                                                       + 1e-5), rtol=1e-4, atol=1e-5)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def causal_mask(n_q, n_kv, dtype=np.float32):
    mask = np.zeros((n_q, n_kv), dtype)
    offset = n_kv - n_q
    for i in range(n_q):
        mask[i, offset + i + 1:] = -np.inf
    return mask


@pytest.mark.parametrize("mask_dtype", [np.float32, np.float16])
def test_soft_max_with_mask_and_scale(compute, rng, mask_dtype):
    scores = f32(rng, 2, 5, 9)                        # (heads, n_q, n_kv)
    mask = causal_mask(5, 9, mask_dtype)
    out = compute(lambda s, m: s.soft_max(m, scale=0.25), scores, mask)
    np.testing.assert_allclose(out, softmax(scores * 0.25 + mask.astype(np.float32)),
                               rtol=1e-5, atol=1e-6)


def test_soft_max_plain(compute, rng):
    x = f32(rng, 3, 100, scale=4)
    np.testing.assert_allclose(compute(lambda t: t.soft_max(), x), softmax(x), rtol=1e-5,
                               atol=1e-7)


@pytest.mark.parametrize("mode", ["normal", "neox"])
@pytest.mark.parametrize("n_dims", [64, 32])
def test_rope(compute, rng, mode, n_dims):
    x, pos = f32(rng, 6, 3, 64), np.array([0, 1, 2, 7, 100, 5000], np.int32)
    out = compute(lambda t, p: t.rope_ext(p, n_dims, mode, freq_base=10000.0), x, pos)
    # the angle in float32: the CPU's repeated products are ~1e-3 rad off at position 5000,
    # CUDA's powf 1.2e-3
    np.testing.assert_allclose(out, rope_reference(x, pos, n_dims, 10000.0, mode == "neox"),
                               rtol=0, atol=2e-3)


def test_rope_with_frequency_factors_and_scaling(compute, rng):
    x, pos = f32(rng, 5, 2, 32), np.arange(0, 50, 10, dtype=np.int32)
    factors = np.linspace(1, 8, 16).astype(np.float32)
    out = compute(lambda t, p, f: t.rope_ext(p, 32, "neox", freq_factors=f, freq_base=500000.0,
                                             freq_scale=0.25, attn_factor=1.3), x, pos, factors)
    expected = rope_reference(x, pos, 32, 500000.0, True, freq_scale=0.25,
                              freq_factors=factors, attn_factor=1.3)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_rope_yarn(compute, rng):
    x, pos = f32(rng, 4, 2, 64), np.array([3, 900, 4000, 8191], np.int32)
    params = dict(freq_base=10000.0, freq_scale=0.25, ext_factor=1.0, attn_factor=1.0,
                  n_ctx_orig=2048, beta_fast=32.0, beta_slow=1.0)
    out = compute(lambda t, p: t.rope_ext(p, 64, "neox", **params), x, pos)
    expected = rope_reference(x, pos, 64, 10000.0, True, freq_scale=0.25, ext_factor=1.0,
                              n_ctx_orig=2048)
    np.testing.assert_allclose(out, expected, rtol=0, atol=2e-3)  # float32 angles, pos 8191


def test_rope_multi_with_one_section_is_neox_rope(compute, rng):
    # M-RoPE rotates pair i with the position of the axis owning i; with every pair in the
    # first section it is neox rope at that axis's positions
    x = f32(rng, 5, 2, 32)
    pos = np.array([0, 4, 9, 20, 33], np.int32)
    positions = np.concatenate([pos, pos + 1, pos + 2, pos + 3]).astype(np.int32)
    out = compute(lambda t, p: t.rope_multi(p, 32, [16, 0, 0, 0], "mrope", freq_base=1e4),
                  x, positions)
    np.testing.assert_allclose(out, rope_reference(x, pos, 32, 1e4, True), rtol=1e-4,
                               atol=1e-4)


def naive_attention(q, k, v, mask, scale, softcap=0.0):
    """q (B, H, n_q, D), k/v (B, H_kv, n_kv, D) -> (B, n_q, H, Dv), GQA by head groups."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = q.astype(np.float64) @ np.swapaxes(k, -1, -2) * scale
    if softcap:
        scores = softcap * np.tanh(scores / softcap)
    return (softmax(scores + mask) @ v).transpose(0, 2, 1, 3)


@pytest.mark.parametrize("heads,kv_heads,n_q,n_kv", [(4, 4, 1, 17), (8, 2, 7, 64),
                                                    (2, 1, 32, 300)])
@pytest.mark.parametrize("kv_dtype", [np.float16, np.float32])
def test_flash_attn_ext(compute, rng, heads, kv_heads, n_q, n_kv, kv_dtype):
    d = 64
    q = f32(rng, 1, heads, n_q, d)
    k = f32(rng, 1, kv_heads, n_kv, d).astype(kv_dtype)
    v = f32(rng, 1, kv_heads, n_kv, d).astype(kv_dtype)
    mask = causal_mask(n_q, n_kv, np.float16)
    scale = 1 / math.sqrt(d)
    out = compute(lambda qt, kt, vt, m: qt.flash_attn_ext(kt, vt, m, scale), q, k, v, mask)
    expected = naive_attention(q, k.astype(np.float32), v.astype(np.float32),
                               mask.astype(np.float32), scale)
    assert out.shape == (1, n_q, heads, d)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-2)


def test_flash_attn_ext_summed_in_float32(compute, rng):
    """Large scores (queries and keys of about 8 over 128 dimensions, 32 queries, 256 keys):
    flash attention asked to accumulate in float32, as the runner asks, is the softmax of
    the scaled scores on every device. (Left to its default, Vulkan's float16 sums were off
    by 0.15 here.)"""
    d, n_q, n_kv = 128, 32, 256
    q = np.full((1, 2, n_q, d), 8.0, np.float32)
    k = (np.full((1, 1, n_kv, d), 8.0) * np.linspace(1.0, 1.01, n_kv)[:, None]).astype(np.float16)
    v = f32(rng, 1, 1, n_kv, d).astype(np.float16)
    mask = np.zeros((n_q, n_kv), np.float16)
    scale = 1 / math.sqrt(d)
    out = compute(lambda qt, kt, vt, m: qt.flash_attn_ext(kt, vt, m, scale).accumulate_in_f32(),
                  q, k, v, mask)
    expected = naive_attention(q, k.astype(np.float32), v.astype(np.float32),
                               mask.astype(np.float32), scale)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-2)


def test_flash_attn_ext_logit_softcap(compute, rng):
    q, k = f32(rng, 1, 2, 3, 64, scale=3), f32(rng, 1, 2, 10, 64, scale=3)
    v = f32(rng, 1, 2, 10, 64)
    k, v, mask = k.astype(np.float16), v.astype(np.float16), causal_mask(3, 10, np.float16)
    out = compute(lambda qt, kt, vt, m: qt.flash_attn_ext(kt, vt, m, 0.125, logit_softcap=5.0),
                  q, k, v, mask)
    expected = naive_attention(q, k.astype(np.float32), v.astype(np.float32),
                               mask.astype(np.float32), 0.125, softcap=5.0)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-2)
