"""Layout operations against numpy: reshape, view, permute, transpose, cont, concat, repeat,
pad, cpy/cast, and the sorting ops."""

import numpy as np
import pytest

import pyggml
from pyggml._ggml import ffi, lib

from .conftest import f32


@pytest.mark.parametrize("shape,new", [((2, 3, 4), (6, 4)), ((24,), (2, -1, 3)),
                                       ((4, 6), (2, 2, 2, 3))])
def test_reshape(compute, rng, shape, new):
    x = f32(rng, *shape)
    out = compute(lambda t: t.reshape(*new), x)
    np.testing.assert_array_equal(out, x.reshape(new))


@pytest.mark.parametrize("axes", [(1, 0), (0, 2, 1), (2, 0, 1), (1, 0, 2), (3, 1, 0, 2)])
def test_permute_matches_numpy_transpose(compute, rng, axes):
    x = f32(rng, *[2, 3, 4, 5][: len(axes)])
    out = compute(lambda t: t.permute(*axes).cont(), x)
    np.testing.assert_array_equal(out, x.transpose(axes))


def test_transpose_swaps_last_two(compute, rng):
    x = f32(rng, 2, 3, 5)
    out = compute(lambda t: t.transpose().cont(), x)
    np.testing.assert_array_equal(out, np.swapaxes(x, -1, -2))


def test_view_with_offset_and_strides(compute, rng):
    x = f32(rng, 6, 10)
    # rows 1..4, columns 2..7 of x
    out = compute(lambda t: t.view((4, 6), offset=(10 + 2) * 4, strides=(40, 4)).cont(), x)
    np.testing.assert_array_equal(out, x[1:5, 2:8])


def test_numpy_of_a_view_of_storage_is_strided_not_copied(rng):
    x = f32(rng, 4, 6)
    storage = pyggml.Context(max_tensors=1, graphs=0)
    t = storage.new_tensor("F32", (4, 6))
    storage.allocate(pyggml.cpu_backend(threads=1))
    t.set(x)
    with pyggml.Context() as ctx:
        array = ctx.bind(t).transpose().numpy()
        np.testing.assert_array_equal(array, x.T)
        assert not array.flags["C_CONTIGUOUS"]
        assert array.base is not None


@pytest.fixture
def doubled(sched, rng):
    """(x, the computed graph result 2x), its context still open."""
    x = f32(rng, 4, 6)
    with pyggml.Context() as ctx:
        t = ctx.new_tensor("F32", (4, 6)).set_input()
        out = t.scale(2.0).set_output()
        sched.compute(ctx.graph(out), {t: x})
        yield x, out


def test_numpy_of_a_view_of_a_result_is_a_copy(doubled):
    x, out = doubled
    array = out.transpose().numpy()
    np.testing.assert_array_equal(array, 2 * x.T)
    assert array.flags["OWNDATA"] or array.base.flags["OWNDATA"]


def test_numpy_into_a_given_array_copies_without_allocating(doubled):
    x, out = doubled
    into = np.zeros((4, 6), dtype=np.float32)
    assert out.numpy(out=into) is into
    np.testing.assert_array_equal(into, 2 * x)
    for wrong in (np.zeros((6, 4), np.float32), np.zeros((4, 6), np.float64),
                  np.zeros((6, 4), np.float32).T):
        with pytest.raises(ValueError, match="contiguous, writable array of shape"):
            out.numpy(out=wrong)
    with pytest.raises(ValueError, match="contiguous"):
        out.transpose().numpy(out=np.zeros((6, 4), np.float32))


def test_a_borrowed_result_is_the_compute_memory_itself(doubled):
    x, out = doubled
    borrowed = out.borrow()
    if out.ptr.buffer and not lib.ggml_backend_buffer_is_host(out.ptr.buffer):
        assert borrowed is None                         # a GPU's (--device): nothing to lend
        return
    np.testing.assert_array_equal(borrowed, 2 * x)
    assert borrowed.ctypes.data == int(ffi.cast("uintptr_t", out.ptr.data))
    assert out.borrow() is borrowed                     # while the memory has not moved
    with pyggml.Context(max_tensors=1, graphs=0) as storage:
        quantized = storage.new_tensor("Q8_0", (2, 32))
        storage.allocate(pyggml.cpu_backend(threads=1))
        assert quantized.borrow() is None              # not plain numbers


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(compute, rng, axis):
    a, b = f32(rng, 2, 3, 4), f32(rng, 2, 3, 4)
    out = compute(lambda x, y: x.concat(y, axis), a, b)
    np.testing.assert_array_equal(out, np.concatenate([a, b], axis=axis))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_concat_takes_a_transposed_view_of_floats(compute, rng, axis):
    """A DeltaNet's convolution input: its state beside the batch's rows transposed, with
    no copy in between (ggml's float kernels read every stride)."""
    a, b = f32(rng, 2, 5, 3), f32(rng, 2, 3, 5)
    out = compute(lambda x, y: x.concat(y.transpose(), axis), a, b)
    np.testing.assert_array_equal(out, np.concatenate([a, b.transpose(0, 2, 1)], axis=axis))


def test_concat_refuses_a_transposed_view_of_a_type_whose_kernel_needs_rows():
    with pyggml.Context() as ctx:
        q = ctx.new_tensor("Q8_0", (64, 64))
        with pytest.raises(pyggml.GGMLError, match="transposed view of this type"):
            q.concat(q.transpose(), axis=0)


def test_repeat(compute, rng):
    a = f32(rng, 1, 3)
    out = compute(lambda x: x.repeat(4, 6), a)
    np.testing.assert_array_equal(out, np.tile(a, (4, 2)))


@pytest.mark.parametrize("widths", [((1, 2), (0, 3)), ((0, 0), (2, 2)), ((1, 0), (0, 0), (2, 1))])
def test_pad_asymmetric(compute, rng, widths):
    x = f32(rng, *[2, 3, 4][-len(widths):])
    out = compute(lambda t: t.pad(widths), x)
    np.testing.assert_array_equal(out, np.pad(x, widths))


def test_cast_and_cpy(compute, rng):
    x = f32(rng, 3, 8)
    half, back = compute(lambda t: (t.cast("F16"), t.cast("F16").cast("F32")), x)
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, x.astype(np.float16))
    np.testing.assert_array_equal(back, x.astype(np.float16).astype(np.float32))
    dst = np.zeros((3, 8), np.float16)
    copied = compute(lambda t, d: t.cpy(d), x, dst)
    np.testing.assert_array_equal(copied, x.astype(np.float16))


def test_argsort(compute, rng):
    x = f32(rng, 4, 37)
    up, down = compute(lambda t: (t.argsort(), t.argsort(descending=True)), x)
    np.testing.assert_array_equal(up, np.argsort(x, axis=-1, kind="stable"))
    np.testing.assert_array_equal(down, np.argsort(-x, axis=-1, kind="stable"))


def test_argmax_matches_numpy(compute, rng):
    x = f32(rng, 5, 49152)
    np.testing.assert_array_equal(compute(lambda t: t.argmax(), x), np.argmax(x, axis=-1))


def test_argmax_takes_the_first_of_ties(compute):
    """Patch 0007: greedy decoding on a device picks what numpy and llama.cpp's greedy
    sampler pick (the unpatched CPU kernel took the last of equal values)."""
    x = np.zeros((3, 3000), dtype=np.float32)
    x[0, [7, 2900]] = 5.0
    x[1, [1000, 1001, 2047]] = 2.5
    x[2, [31, 32, 33, 64]] = 1.0                   # neighbours of one warp and the next
    np.testing.assert_array_equal(compute(lambda t: t.argmax(), x), [7, 1000, 31])


def test_argmax_of_more_than_a_matrix_is_an_error():
    with pyggml.Context() as ctx:
        with pytest.raises(ValueError, match="vector or a matrix"):
            ctx.new_tensor("F32", (2, 3, 4)).argmax()


def test_top_k(compute, rng):
    x = f32(rng, 3, 1000)
    out = compute(lambda t: t.top_k(10), x)
    assert out.shape == (3, 10)
    for row, picked in zip(x, out):
        assert set(picked) == set(np.argsort(-row)[:10])
