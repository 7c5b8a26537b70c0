"""Contexts: storage contexts (weights, caches) and where operation results are built."""

import numpy as np

import pyggml


def test_results_of_ops_on_storage_go_to_the_graph_context(sched, rng):
    weights = pyggml.Context(max_tensors=2, graphs=0)
    w = weights.new_tensor("F32", (3, 4), name="w")
    weights.allocate(pyggml.cpu_backend(threads=1))
    values = rng.standard_normal((3, 4)).astype(np.float32)
    w.set(values)
    with pyggml.Context() as ctx:
        x = ctx.new_tensor("F32", (2, 4)).set_input()
        y = w.mul_mat(x)
        assert y.context is ctx and weights.storage and not ctx.storage
        sched.compute(ctx.graph(y), {x: np.ones((2, 4), np.float32)})
        np.testing.assert_allclose(y.numpy(), np.ones((2, 4)) @ values.T, rtol=1e-6)


def test_bind_builds_views_of_storage_in_the_graph_context(sched):
    cache_ctx = pyggml.Context(max_tensors=1, graphs=0)
    cache = cache_ctx.new_tensor("F32", (8, 4))
    cache_ctx.allocate(pyggml.cpu_backend(threads=1))
    cache.set(np.arange(32, dtype=np.float32).reshape(8, 4))
    with pyggml.Context() as ctx:
        rows = ctx.bind(cache).view((3, 4), offset=2 * 16)
        out = rows.scale(2.0).set_output()
        assert rows.context is ctx
        del cache_ctx, cache          # the graph context keeps the storage alive
        sched.compute(ctx.graph(out))
        np.testing.assert_array_equal(out.numpy(), 2 * np.arange(8, 20).reshape(3, 4))


def test_tensors_lists_creation_order():
    with pyggml.Context() as ctx:
        names = ["a", "b", "c"]
        for name in names:
            ctx.new_tensor("F32", (2,), name=name)
        assert [t.name for t in ctx.tensors()] == names


def test_graph_results_are_copies_and_storage_is_viewed(rng):
    """A result lives in the scheduler's compute memory, which the next graph reuses and
    closing the scheduler frees: numpy() copies it. Storage is viewed without a copy."""
    values = rng.standard_normal((64, 128)).astype(np.float32)
    with pyggml.Context() as ctx, pyggml.Scheduler() as sched:
        x = ctx.new_tensor("F32", values.shape).set_input()
        y = x.scale(2.0)
        sched.compute(ctx.graph(y), {x: values})
        result = y.numpy()
        sched.compute(ctx.graph(y), {x: values + 1})       # the same memory, new values
    np.testing.assert_array_equal(result, 2 * values)     # after both are closed, too
    storage = pyggml.Context(max_tensors=1, graphs=0)
    t = storage.new_tensor("F32", (4,))
    storage.allocate(pyggml.cpu_backend(threads=1))
    t.set(np.arange(4, dtype=np.float32))
    view = t.numpy()
    t.set(np.ones(4, dtype=np.float32))
    np.testing.assert_array_equal(view, np.ones(4))       # a view of the tensor's memory
