"""The per-node profiler: every node of a computed graph, timed, grouped by operation."""

import numpy as np

import pyggml
from pyggml.profile import Profiler, by_op


def test_every_node_is_timed_and_the_result_is_unchanged(rng):
    cpu = pyggml.cpu_backend(threads=1)
    w, x = rng.standard_normal((64, 32), np.float32), rng.standard_normal((8, 32), np.float32)
    with pyggml.Context() as ctx, pyggml.Scheduler([cpu]) as sched:
        weight = ctx.new_tensor("F32", (64, 32)).set_input()
        inp = ctx.new_tensor("F32", (8, 32)).set_input()
        out = weight.mul_mat(inp).silu().sum_rows().set_output()
        graph = ctx.graph(out)
        with Profiler(sched) as profiler:
            sched.compute(graph, {weight: w, inp: x})
            profiled = out.numpy(copy=True)
        sched.compute(graph, {weight: w, inp: x})
        np.testing.assert_array_equal(profiled, out.numpy())
        assert [n.op for n in profiler.nodes] == ["MUL_MAT(f32)", "SILU", "SUM_ROWS"]
        assert all(n.seconds > 0 for n in profiler.nodes)
        assert profiler.nodes[0].shape == (8, 64)
        totals = by_op(profiler.nodes)
        assert set(totals) == {"MUL_MAT(f32)", "SILU", "SUM_ROWS"}
        assert all(count == 1 for count, _ in totals.values())
        text = profiler.table()
        assert "MUL_MAT(f32)" in text and "slowest nodes" in text
        profiler.clear()
        sched.compute(graph, {weight: w, inp: x})              # no longer watching
        assert profiler.nodes == []
