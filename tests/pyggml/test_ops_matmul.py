"""Products and lookups: mul_mat (float and quantized), mul_mat_id, get_rows, set_rows.

Quantized references: weights quantized by ggml, dequantized by the gguf package's own numpy
implementation (independent of ggml), then multiplied by numpy.
"""

import gguf.quants
import numpy as np
import pytest

import pyggml

from .conftest import Raw, f32

QUANT_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]


def reference_dequantize(raw: np.ndarray, name: str) -> np.ndarray:
    return gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[name]).astype(np.float32)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((5, 8), (3, 8)), ((2, 5, 8), (2, 3, 8)), ((1, 4, 16), (3, 2, 16)),
    ((2, 1, 4, 16), (2, 3, 5, 16))])
def test_mul_mat_f32_broadcasts(compute, rng, a_shape, b_shape, product_tolerance):
    a, b = f32(rng, *a_shape), f32(rng, *b_shape)
    out = compute(lambda x, y: x.mul_mat(y), a, b)
    np.testing.assert_allclose(out, b @ np.swapaxes(a, -1, -2), **product_tolerance)


def test_mul_mat_f16_weights(compute, rng):
    a, b = f32(rng, 64, 128).astype(np.float16), f32(rng, 7, 128)
    out = compute(lambda x, y: x.mul_mat(y), a, b)
    expected = b.astype(np.float16).astype(np.float32) @ a.astype(np.float32).T
    np.testing.assert_allclose(out, expected, rtol=2e-3, atol=2e-2)


def test_mul_mat_of_permuted_operands(compute, rng, product_tolerance):
    # attention-style: q and k permuted views (rows still contiguous)
    q, k = f32(rng, 5, 2, 16), f32(rng, 7, 2, 16)   # (T, H, D)
    out = compute(lambda qt, kt: kt.permute(1, 0, 2).mul_mat(qt.permute(1, 0, 2)), q, k)
    expected = q.transpose(1, 0, 2) @ k.transpose(1, 2, 0)   # (H, Tq, Tk)
    np.testing.assert_allclose(out, expected, **product_tolerance)


@pytest.mark.parametrize("name", QUANT_TYPES)
@pytest.mark.parametrize("rows,n_tokens", [(16, 1), (32, 9)])
def test_quantized_mul_mat(compute, rng, name, rows, n_tokens):
    cols = 512
    weights = f32(rng, rows, cols)
    raw = pyggml.quantize(weights, name)
    x = f32(rng, n_tokens, cols)
    out = compute(lambda w, t: w.mul_mat(t), Raw(name, raw, (rows, cols)), x)
    expected = x @ reference_dequantize(raw, name).T
    # the CPU quantizes activations (Q8_0/Q8_K) for the dot products
    scale = np.abs(expected).max()
    np.testing.assert_allclose(out, expected, atol=0.02 * scale, rtol=0)


@pytest.mark.parametrize("name", QUANT_TYPES + ["F16", "F32"])
def test_get_rows(compute, rng, name):
    rows, cols = 40, 256
    table = f32(rng, rows, cols)
    ids = np.array([3, 0, 39, 3, 17], np.int32)
    if name == "F32":
        src, expected = table, table[ids]
    elif name == "F16":
        src, expected = table.astype(np.float16), table.astype(np.float16).astype(np.float32)[ids]
    else:
        raw = pyggml.quantize(table, name)
        src, expected = Raw(name, raw, (rows, cols)), reference_dequantize(raw, name)[ids]
    out = compute(lambda t, i: t.get_rows(i), src, ids)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_set_rows_writes_and_converts(compute, rng, index_dtype):
    cache = np.zeros((8, 16), np.float16)
    src = f32(rng, 3, 16)
    ids = np.array([6, 1, 4], index_dtype)
    out = compute(lambda c, s, i: c.set_rows(s, i), cache, src, ids)
    expected = cache.copy()
    expected[ids] = src.astype(np.float16)
    np.testing.assert_array_equal(out, expected)


def test_mul_mat_id_routes_tokens_to_experts(compute, rng):
    n_expert, rows, cols, tokens, used = 4, 6, 32, 5, 2
    experts = f32(rng, n_expert, rows, cols)
    x = f32(rng, tokens, 1, cols)                   # one input row per token, shared by slots
    # a router's top-k: distinct experts per token (CUDA's kernel counts on it)
    ids = np.stack([rng.permutation(n_expert)[:used] for _ in range(tokens)]).astype(np.int32)
    out = compute(lambda e, t, i: e.mul_mat_id(t, i), experts, x, ids)
    expected = np.stack([[experts[ids[t, u]] @ x[t, 0] for u in range(used)]
                         for t in range(tokens)])
    assert out.shape == (tokens, used, rows)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_scores_past_the_float16_range_are_summed_in_float32(compute):
    """Attention-like scores (F16 keys times 32 F32 queries) of 230,400, past float16's
    65,504: asked to accumulate in float32, as the runner's attention asks, every device
    gives them. (Left to its default, Vulkan sums such products in float16: 65,504.)"""
    keys = np.full((64, 256), 30.0, np.float16)
    queries = np.full((32, 256), 30.0, np.float32)
    out = compute(lambda k, q: k.mul_mat(q).accumulate_in_f32(), keys, queries)
    np.testing.assert_array_equal(out, np.full((32, 64), 230400.0, np.float32))


def test_only_products_take_an_accumulation_precision():
    with pyggml.Context() as ctx:
        x = ctx.new_tensor("F32", (2, 8))
        with pytest.raises(pyggml.GGMLError, match="Only products"):
            x.scale(2.0).accumulate_in_f32()


def test_walsh_hadamard_is_orthonormal_and_its_own_inverse():
    for n in (1, 2, 64, 256):
        h = pyggml.walsh_hadamard(n)
        assert h.dtype == np.float32 and h.shape == (n, n)
        np.testing.assert_allclose(h @ h, np.eye(n), atol=1e-6)
        np.testing.assert_array_equal(h, h.T)
    assert pyggml.walsh_hadamard(128)[0, 0] == np.float32(1 / np.sqrt(np.float32(128)))
    with pytest.raises(ValueError, match="power-of-two side, not 96"):
        pyggml.walsh_hadamard(96)


@pytest.mark.parametrize("shape,n", [((3, 2, 128), 64), ((5, 256), 256), ((1, 4, 64), 64)])
def test_hadamard_rotates_runs_and_undoes_itself(compute, rng, shape, n):
    """The product marked as a Walsh-Hadamard one (the CPU's fast transform, which reads only
    the side of the matrix) equals numpy's product run by run; twice gives x back."""
    x, h = f32(rng, *shape), pyggml.walsh_hadamard(n)
    once, twice = compute(lambda t, r: (t.hadamard(r), t.hadamard(r).hadamard(r)), x, h)
    expected = (x.reshape(-1, n) @ h.T).reshape(shape)
    np.testing.assert_allclose(once, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(twice, x, rtol=0, atol=1e-5)


def test_hadamard_of_a_permuted_view_and_bad_sides(compute, rng):
    x, h = f32(rng, 64, 3), pyggml.walsh_hadamard(64)
    out = compute(lambda t, r: t.transpose().hadamard(r), x, h)                  # (3, 64)
    np.testing.assert_allclose(out, x.T @ h.T, rtol=0, atol=1e-5)
    with pyggml.Context() as ctx:
        rows = ctx.new_tensor("F32", (4, 96))
        with pytest.raises(ValueError, match=r"\(64, 64\) cannot rotate rows of 96"):
            rows.hadamard(ctx.new_tensor("F32", (64, 64)))
        with pytest.raises(ValueError, match=r"\(48, 48\) cannot rotate rows of 96"):
            rows.hadamard(ctx.new_tensor("F32", (48, 48)))
