"""The recurrent layers' operations against numpy: l2_norm, cumsum, ssm_conv and the gated
delta rule (from a state, several sequences, state snapshots)."""

import numpy as np
import pytest

import pyggml

from .conftest import f32


def test_l2_norm_divides_each_row_by_its_length(compute, rng):
    x = f32(rng, 3, 5, 16)
    out = compute(lambda t: t.l2_norm(1e-6), x)
    np.testing.assert_allclose(out, x / np.linalg.norm(x, axis=-1, keepdims=True), rtol=1e-5)


def test_l2_norm_of_a_zero_row_is_zero_not_nan(compute):
    out = compute(lambda t: t.l2_norm(1e-6), np.zeros((2, 8), np.float32))
    np.testing.assert_array_equal(out, 0)


def test_cumsum_runs_over_the_last_dimension(compute, rng):
    x = f32(rng, 4, 3, 70)
    np.testing.assert_allclose(compute(lambda t: t.cumsum(), x), np.cumsum(x, axis=-1),
                               rtol=1e-5, atol=1e-5)


def reference_conv(x, kernel):
    """x (S, C, K - 1 + T), kernel (C, K) -> (S, T, C)."""
    k = kernel.shape[1]
    t = x.shape[2] - k + 1
    return np.stack([np.einsum("scj,cj->sc", x[:, :, i:i + k], kernel) for i in range(t)],
                    axis=1)


# CUDA's kernel takes channels in multiples of 128 (the models' are; it declines 6)
@pytest.mark.parametrize("sequences,tokens,channels", [(1, 1, 6), (1, 7, 6), (3, 5, 6),
                                                      (2, 3, 256)])
def test_ssm_conv_is_a_causal_depthwise_convolution(compute, rng, sequences, tokens, channels):
    x, kernel = f32(rng, sequences, channels, 3 + tokens), f32(rng, channels, 4)
    out = compute(lambda a, b: a.ssm_conv(b), x, kernel)
    assert out.shape == (sequences, tokens, channels)
    np.testing.assert_allclose(out, reference_conv(x, kernel), rtol=1e-5, atol=1e-5)


def test_ssm_conv_refuses_a_kernel_of_other_channels(compute, rng):
    with pytest.raises(pyggml.GGMLError):
        compute(lambda a, b: a.ssm_conv(b), f32(rng, 1, 6, 5), f32(rng, 5, 4))


def reference_delta_rule(q, k, v, gate, beta, state):
    """The gated delta rule as transformers' torch_recurrent_gated_delta_rule writes it, with
    ggml's head sharing (value head h reads key head h % Hk) and transposed state.
    q, k (S, T, Hk, D), v (S, T, H, D), gate and beta (S, T, H, 1), state (S, H, D, D) ->
    outputs (S, T, H, D), final state (S, H, D, D)."""
    s_count, t_count, heads, d = v.shape
    hk = q.shape[2]
    matrix = np.swapaxes(state, -1, -2).astype(np.float64).copy()     # M[s, h, i, j]
    out = np.zeros(v.shape, np.float64)
    for s in range(s_count):
        for t in range(t_count):
            for h in range(heads):
                qh, kh = q[s, t, h % hk].astype(np.float64), k[s, t, h % hk].astype(np.float64)
                m = matrix[s, h] * np.exp(gate[s, t, h, 0])
                delta = (v[s, t, h] - m.T @ kh) * beta[s, t, h, 0]
                m = m + np.outer(kh, delta)
                matrix[s, h] = m
                out[s, t, h] = m.T @ qh / np.sqrt(d)
    return out, np.swapaxes(matrix, -1, -2)


# head sizes CUDA's kernel is built for (16, 32, 64, 128), 128 the released models', and 8,
# which CUDA declines (patch 0009; its kernel aborted the process)
@pytest.mark.parametrize("sequences,tokens,key_heads,d", [(1, 1, 2, 16), (1, 9, 2, 16),
                                                         (3, 4, 1, 16), (2, 3, 2, 128),
                                                         (1, 3, 2, 8)])
def test_gated_delta_net_matches_the_delta_rule(compute, rng, sequences, tokens, key_heads, d):
    heads = 2 * key_heads if key_heads > 1 else 3
    q = f32(rng, sequences, tokens, key_heads, d)
    k = f32(rng, sequences, tokens, key_heads, d)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = f32(rng, sequences, tokens, heads, d)
    gate = -np.abs(f32(rng, sequences, tokens, heads, 1))
    beta = 1 / (1 + np.exp(-f32(rng, sequences, tokens, heads, 1)))
    state = f32(rng, sequences, heads, d, d) * 0.1
    out = compute(lambda *t: t[0].gated_delta_net(*t[1:]), q, k, v, gate, beta, state)
    expected, final = reference_delta_rule(q, k, v, gate, beta, state)
    rows = sequences * tokens
    np.testing.assert_allclose(out[:rows].reshape(expected.shape), expected, rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(out[rows:].reshape(final.shape), final, rtol=1e-4, atol=1e-5)


def test_gated_delta_net_snapshots_the_states_before_the_last(compute, rng):
    d, heads, tokens = 16, 2, 5
    q, k = f32(rng, 1, tokens, heads, d), f32(rng, 1, tokens, heads, d)
    v = f32(rng, 1, tokens, heads, d)
    gate, beta = -np.abs(f32(rng, 1, tokens, heads, 1)), np.full((1, tokens, heads, 1), 0.5,
                                                                    np.float32)
    state = np.zeros((1, heads, d, d), np.float32)
    out = compute(lambda *t: t[0].gated_delta_net(*t[1:], snapshots=2), q, k, v, gate, beta,
                  state)
    _, before_last = reference_delta_rule(q[:, :-1], k[:, :-1], v[:, :-1], gate[:, :-1],
                                          beta[:, :-1], state)
    snapshot = out[tokens + d:tokens + 2 * d]       # past the outputs and the last state
    np.testing.assert_allclose(snapshot.reshape(before_last.shape), before_last, rtol=1e-4,
                               atol=1e-5)
