"""Element-wise operations against numpy, with broadcasting and non-contiguous operands."""

import math

import numpy as np
import pytest

from .conftest import f32

SHAPES = [(7,), (3, 5), (2, 3, 4), (2, 2, 3, 8)]

BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}

_erf = np.vectorize(math.erf)

UNARY = {
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
    "gelu_erf": lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
    "gelu_quick": lambda x: x / (1 + np.exp(-1.702 * x)),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
    "softplus": lambda x: np.log1p(np.exp(x)),
    "exp": np.exp,
    "sqr": np.square,
    "sqrt": lambda x: np.sqrt(np.abs(x)),
    "log": lambda x: np.log(np.abs(x)),
    "floor": np.floor,
    "sum_rows": lambda x: x.sum(axis=-1, keepdims=True),
    "mean": lambda x: x.mean(axis=-1, keepdims=True),
}


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("shape", SHAPES)
def test_binary(compute, rng, name, shape):
    a, b = f32(rng, *shape), f32(rng, *shape)
    if name == "div":
        b = np.where(np.abs(b) < 0.1, 1.0, b).astype(np.float32)
    out = compute(lambda x, y: getattr(x, name)(y), a, b)
    np.testing.assert_allclose(out, BINARY[name](a, b), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", BINARY)
def test_binary_broadcasts_the_second_operand(compute, rng, name):
    a, row = f32(rng, 2, 4, 6), f32(rng, 1, 1, 6) + 3
    out = compute(lambda x, y: getattr(x, name)(y), a, row)
    np.testing.assert_allclose(out, BINARY[name](a, row), rtol=1e-6, atol=1e-6)


def test_operators_and_scalars(compute, rng):
    a, b = f32(rng, 3, 4), f32(rng, 3, 4)
    out = compute(lambda x, y: (x + y) * y - x / 2.0, a, b)
    np.testing.assert_allclose(out, (a + b) * b - a / 2, rtol=1e-6, atol=1e-6)


def test_non_contiguous_operands(compute, rng):
    # permuted outer axes and a strided slice of rows: not contiguous, rows still are
    a, b = f32(rng, 4, 6, 8), f32(rng, 6, 4, 8)
    out = compute(lambda x, y: y.add(x.permute(1, 0, 2)).silu(), a, b)
    s = b + a.transpose(1, 0, 2)
    np.testing.assert_allclose(out, s / (1 + np.exp(-s)), rtol=1e-5, atol=1e-6)


def test_strided_row_view(compute, rng):
    x = f32(rng, 10, 8)
    every_other_row = lambda t: t.view((5, 8), offset=0, strides=(2 * 8 * 4, 4))
    out = compute(lambda t: every_other_row(t).mul(every_other_row(t)), x)
    np.testing.assert_allclose(out, x[::2] ** 2, rtol=1e-6)


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("shape", [(64,), (3, 33), (2, 3, 16)])
def test_unary(compute, rng, name, shape):
    x = f32(rng, *shape, scale=2.0)
    if name in ("sqrt", "log"):
        x = np.abs(x)
    out = compute(lambda t: getattr(t, name)(), x)
    # ggml computes gelu/silu through fp16 tables or fast approximations on the CPU
    tolerance = {"gelu": 2e-3, "gelu_quick": 2e-3, "gelu_erf": 1e-4}.get(name, 1e-5)
    np.testing.assert_allclose(out, UNARY[name](x.astype(np.float64)), rtol=tolerance,
                               atol=tolerance)


def test_scale_with_a_bias(compute, rng):
    x = f32(rng, 3, 8)
    np.testing.assert_allclose(compute(lambda t: t.scale(0.5, bias=2.0), x), x * 0.5 + 2.0,
                               rtol=1e-6)


def test_unary_on_a_permuted_view(compute, rng):
    x = f32(rng, 4, 8, 16)
    out = compute(lambda t: t.permute(1, 0, 2).cont().tanh(), x)
    np.testing.assert_allclose(out, np.tanh(x.transpose(1, 0, 2)), rtol=1e-5, atol=1e-6)


def test_scale_and_clamp(compute, rng):
    x = f32(rng, 5, 9)
    out = compute(lambda t: t.scale(3.5).clamp(-1.0, 2.0), x)
    np.testing.assert_allclose(out, np.clip(x * 3.5, -1, 2), rtol=1e-6)


def test_quick_gelu_is_an_alias(compute, rng):
    x = f32(rng, 32)
    a, b = compute(lambda t: (t.quick_gelu(), t.gelu_quick()), x)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name,activation", [("swiglu", "silu"), ("geglu", "gelu")])
def test_fused_gates_equal_activation_times_up(compute, rng, name, activation):
    gate, up = f32(rng, 3, 64, scale=3), f32(rng, 3, 64)
    fused, separate = compute(lambda g, u: (getattr(g, name)(u), getattr(g, activation)().mul(u)),
                              gate, up)
    np.testing.assert_array_equal(fused, separate)


def test_geglu_halves_gates_the_second_half_by_the_first(compute, rng, same_kernels):
    gate_up = f32(rng, 3, 2, 64, scale=3)            # (..., 2F): gate, then up
    fused, separate = compute(lambda t: (t.geglu_halves(), t.view(
        (3, 2, 32), strides=t.strides).gelu().mul(t.view((3, 2, 32), offset=32 * 4,
                                                          strides=t.strides))), gate_up)
    assert fused.shape == (3, 2, 32)
    if same_kernels:
        np.testing.assert_array_equal(fused, separate)
    else:                      # CUDA on an H100: 3e-4 relative, 1.2e-4 absolute near zero
        np.testing.assert_allclose(fused, separate, rtol=2e-3, atol=5e-4)
