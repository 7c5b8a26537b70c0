"""Bad input raises a clear exception and never takes the process down."""

import numpy as np
import pytest

import pyggml
from pyggml import GGMLError

from .conftest import f32


@pytest.fixture
def ctx():
    with pyggml.Context() as context:
        yield context


def allocated(ctx, *specs):
    tensors = [ctx.new_tensor(dtype, shape) for dtype, shape in specs]
    ctx.allocate(pyggml.cpu_backend(threads=1))
    return tensors


def test_set_with_wrong_shape_names_both(ctx):
    (t,) = allocated(ctx, ("F32", (3, 4)))
    with pytest.raises(ValueError, match=r"shape \(4, 3\).*expected shape \(3, 4\)"):
        t.set(np.zeros((4, 3), np.float32))


def test_set_with_wrong_dtype(ctx):
    (t,) = allocated(ctx, ("F32", (3, 4)))
    with pytest.raises(ValueError, match="dtype float64.*float32"):
        t.set(np.zeros((3, 4)))
    with pytest.raises(TypeError, match="numpy array"):
        t.set([[0.0] * 4] * 3)


def test_quantized_set_takes_raw_rows(ctx):
    (t,) = allocated(ctx, ("Q8_0", (2, 64)))
    with pytest.raises(ValueError, match=r"expected shape \(2, 68\) and dtype uint8"):
        t.set(np.zeros((2, 64), np.float32))
    t.set(pyggml.quantize(np.ones((2, 64), np.float32), "Q8_0"))
    np.testing.assert_allclose(t.numpy(), np.ones((2, 64)), rtol=1e-3)


def test_bad_tensor_shapes(ctx):
    with pytest.raises(ValueError, match="1 to 4 dimensions"):
        ctx.new_tensor("F32", (1, 2, 3, 4, 5))
    with pytest.raises(ValueError, match="non-negative"):
        ctx.new_tensor("F32", (2, -3))
    with pytest.raises(ValueError, match="integers"):
        ctx.new_tensor("F32", (2.5,))
    with pytest.raises(ValueError, match="multiple of 32"):
        ctx.new_tensor("Q4_0", (2, 30))
    with pytest.raises(ValueError, match="Unknown ggml type 'F33'"):
        ctx.new_tensor("F33", (2,))


def test_mismatched_operands_raise_with_ggml_message_and_shapes(ctx):
    a, b = ctx.new_tensor("F32", (3, 4), name="w"), ctx.new_tensor("F32", (5, 7))
    with pytest.raises(GGMLError, match=r"mul_mat failed \('w' F32 \(3, 4\), F32 \(5, 7\)\)"
                                        r".*ggml_can_mul_mat"):
        a.mul_mat(b)
    with pytest.raises(GGMLError, match="ggml_can_repeat"):
        a.add(b)
    with pytest.raises(GGMLError, match="rope_ext failed"):
        a.rope_ext(ctx.new_tensor("I32", (9,)), 4)
    with pytest.raises(GGMLError):
        a.flash_attn_ext(b, b)
    # the process is fine and the context still works
    assert a.mul_mat(ctx.new_tensor("F32", (2, 4))).shape == (2, 3)


def test_transposed_operand_is_refused_before_compute(ctx):
    a, b = ctx.new_tensor("F32", (4, 6)), ctx.new_tensor("F32", (6, 4))
    with pytest.raises(GGMLError, match=r"transposed view.*cont\(\) it first"):
        a.transpose().add(b)
    with pytest.raises(GGMLError, match="transposed view"):
        b.mul_mat(a.transpose())
    assert a.transpose().cont().add(b).shape == (6, 4)


def test_layout_misuse(ctx):
    t = ctx.new_tensor("F32", (2, 3, 4))
    with pytest.raises(GGMLError, match=r"reshaping to \(5, 5\) failed.*nelements"):
        t.reshape(5, 5)
    with pytest.raises(ValueError, match="Cannot reshape 24 elements"):
        t.reshape(5, -1)
    with pytest.raises(ValueError, match="permutation"):
        t.permute(0, 0, 1)
    with pytest.raises(ValueError, match="past the end"):
        t.view((2, 3, 5))
    with pytest.raises(ValueError, match="out of range"):
        t.concat(t, axis=3)
    with pytest.raises(ValueError, match="pairs"):
        t.pad([(1, 1)])
    with pytest.raises(ValueError, match="Unknown rope mode"):
        t.rope_ext(ctx.new_tensor("I32", (2,)), 4, mode="sideways")


def test_context_and_graph_capacity(ctx):
    small = pyggml.Context(max_tensors=2, graphs=0)
    small.new_tensor("F32", (1,))
    small.new_tensor("F32", (1,))
    with pytest.raises(GGMLError, match="context is full"):
        small.new_tensor("F32", (1,))
    with pytest.raises(GGMLError, match="holds storage, so bind"):
        next(small.tensors()).exp()
    small.close()
    tiny = pyggml.Context(max_tensors=64, graph_size=4)
    x = tiny.new_tensor("F32", (8,))
    y = x
    for _ in range(10):
        y = y.exp()
    with pytest.raises(GGMLError, match="adding to the graph failed"):
        tiny.graph(y)
    tiny.close()


def test_out_of_range_indices_are_refused_at_set(sched):
    with pyggml.Context() as ctx:
        table = ctx.new_tensor("F32", (10, 4)).set_input()
        ids = ctx.new_tensor("I32", (3,)).set_input()
        out = table.get_rows(ids)
        sched.alloc(ctx.graph(out))
        table.set(np.zeros((10, 4), np.float32))
        with pytest.raises(ValueError, match=r"get_rows row ids.*\[0, 10\).*given 10"):
            ids.set(np.array([1, 10, 2], np.int32))
        with pytest.raises(ValueError, match="given -1"):
            ids.set(np.array([1, -1, 2], np.int32))
        ids.set(np.array([1, 9, 2], np.int32))
        sched.compute_async(ctx.graph(out)).wait()


def test_out_of_range_64_bit_slots_are_refused_at_set(sched):
    with pyggml.Context() as ctx:
        cache = ctx.new_tensor("F32", (10, 4)).set_input()
        rows = ctx.new_tensor("F32", (2, 4)).set_input()
        slots = ctx.new_tensor("I64", (2,)).set_input()
        sched.alloc(ctx.graph(cache.set_rows(rows, slots)))
        for bad in (10, -1, -2 ** 40, 2 ** 40):
            with pytest.raises(ValueError, match=f"given {bad}"):
                slots.set(np.array([0, bad], np.int64))
        slots.set(np.array([0, 9], np.int64))


def test_an_index_input_left_unset_is_refused(sched):
    with pyggml.Context() as ctx:
        table = ctx.new_tensor("F32", (10, 4)).set_input()
        ids = ctx.new_tensor("I32", (3,)).set_input()
        graph = ctx.graph(table.get_rows(ids))
        ids_early = np.array([1, 2, 3], np.int32)
        sched.alloc(graph)
        table.set(np.zeros((10, 4), np.float32))
        with pytest.raises(GGMLError, match="get_rows row ids was not set since the graph"):
            sched.compute_async(graph)
        ids.set(ids_early)
        sched.compute_async(graph).wait()
        sched.alloc(graph)                      # fresh memory again: must be set again
        with pytest.raises(GGMLError, match="was not set"):
            sched.compute_async(graph)


def test_use_after_close_raises(sched):
    ctx = pyggml.Context()
    t = ctx.new_tensor("F32", (2, 2)).set_input()
    out = t.scale(2.0)
    sched.compute(ctx.graph(out), {t: np.ones((2, 2), np.float32)})
    ctx.close()
    with pytest.raises(GGMLError, match="context was closed"):
        t.shape
    with pytest.raises(GGMLError, match="context was closed"):
        t.add(t)
    with pytest.raises(GGMLError, match="context was closed"):
        out.numpy()
    ctx.close()   # twice is fine


def test_reads_after_buffer_or_scheduler_close_raise():
    backend = pyggml.cpu_backend(threads=1)
    with pyggml.Context() as ctx:
        t = ctx.new_tensor("F32", (3,))
        buffer = ctx.allocate(backend)
        t.set(np.arange(3, dtype=np.float32))
        buffer.close()
        with pytest.raises(GGMLError, match="no memory"):
            t.numpy()
    scheduler = pyggml.Scheduler([backend])
    with pyggml.Context() as ctx:
        x = ctx.new_tensor("F32", (3,)).set_input()
        y = x.scale(3.0).set_output()
        scheduler.compute(ctx.graph(y), {x: np.ones(3, np.float32)})
        np.testing.assert_array_equal(y.numpy(), [3, 3, 3])
        scheduler.close()
        with pytest.raises(GGMLError, match="no memory"):
            y.numpy()
        with pytest.raises(GGMLError, match="scheduler was closed"):
            scheduler.compute(ctx.graph(y))


def test_graph_larger_than_the_scheduler(rng):
    with pyggml.Scheduler(graph_size=8) as small, pyggml.Context() as ctx:
        y = ctx.new_tensor("F32", (4,))
        for _ in range(20):
            y = y.sqr()
        with pytest.raises(GGMLError, match="at most 8"):
            small.compute(ctx.graph(y))


def test_thread_count_is_checked():
    backend = pyggml.cpu_backend(threads=1)
    with pytest.raises(ValueError, match="positive integer"):
        backend.set_threads(0)
    backend.close()
    with pytest.raises(GGMLError, match="closed"):
        backend.set_threads(2)


def test_unknown_device():
    with pytest.raises(GGMLError, match="No device named 'TPU9'.*CPU"):
        pyggml.device("TPU9")


def test_numpy_of_unallocated_tensor(ctx):
    with pytest.raises(GGMLError, match="no memory yet"):
        ctx.new_tensor("F32", (2,)).numpy()


def test_dequantize_size_mismatch():
    with pytest.raises(ValueError, match="cannot hold"):
        pyggml.dequantize(np.zeros(10, np.uint8), pyggml.GGMLType.Q8_0, (32,))


def test_f32_helper_is_used(rng):
    assert f32(rng, 2).dtype == np.float32


def test_allocation_failure_raises():
    with pyggml.Context() as ctx:
        ctx.new_tensor("F32", (1 << 30, 1 << 30))          # 4 EiB: beyond any address space
        with pytest.raises(GGMLError, match=r"Could not allocate \d+ bytes on CPU"):
            ctx.allocate(pyggml.cpu_backend(threads=1))


def test_compute_memory_failure_raises(sched):
    with pyggml.Context() as ctx:
        x = ctx.new_tensor("F32", (1 << 30, 1 << 30)).set_input()   # 4 EiB
        with pytest.raises(GGMLError, match="Could not allocate compute memory"):
            sched.alloc(ctx.graph(x.exp()))
        small = ctx.new_tensor("F32", (4,)).set_input()
        y = small.exp()
        sched.compute(ctx.graph(y), {small: np.zeros(4, np.float32)})
        np.testing.assert_array_equal(y.numpy(), np.ones(4))
