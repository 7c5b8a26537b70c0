"""Operations on non-contiguous views (permuted outer axes, rows still contiguous) give what
numpy gives on the same view."""

import numpy as np
import pytest

from tests.support.rope import rope_reference

from .conftest import f32

CASES = {
    "rms_norm": (lambda t: t.rms_norm(1e-6),
                 lambda a: a / np.sqrt((a**2).mean(-1, keepdims=True) + 1e-6)),
    "sum_rows": (lambda t: t.sum_rows(), lambda a: a.sum(-1, keepdims=True)),
    "exp": (lambda t: t.exp(), np.exp),
    "argsort": (lambda t: t.argsort(), lambda a: np.argsort(a, -1, kind="stable")),
    "concat": (lambda t: t.concat(t, 1), lambda a: np.concatenate([a, a], 1)),
    "pad": (lambda t: t.pad([(0, 1), (1, 0), (0, 2)]),
            lambda a: np.pad(a, [(0, 1), (1, 0), (0, 2)])),
    "cast": (lambda t: t.cast("F16"), lambda a: a.astype(np.float16)),
}


@pytest.mark.parametrize("name", CASES)
def test_op_on_a_permuted_view(compute, rng, name):
    x = f32(rng, 4, 6, 32)
    build, reference = CASES[name]
    out = compute(lambda t: build(t.permute(1, 0, 2)), x)
    np.testing.assert_allclose(out, reference(x.transpose(1, 0, 2)), rtol=1e-5, atol=1e-6)


def test_rope_on_a_permuted_view(compute, rng):
    x, pos = f32(rng, 3, 5, 32), np.arange(5, dtype=np.int32)
    out = compute(lambda t, p: t.permute(1, 0, 2).rope_ext(p, 32, "neox"), x, pos)
    expected = rope_reference(x.transpose(1, 0, 2), pos, 32, 10000.0, True)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_top_k_on_a_permuted_view(compute, rng):
    x = f32(rng, 4, 6, 50)
    out = compute(lambda t: t.permute(1, 0, 2).top_k(5), x)
    view = x.transpose(1, 0, 2)
    for i in range(6):
        for j in range(4):
            assert set(out[i, j]) == set(np.argsort(-view[i, j])[:5])
