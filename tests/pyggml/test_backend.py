"""Devices, backends, system info and its structured log records."""

import json
import logging
import os
from importlib import resources

import numpy as np
import pytest

import pyggml
from pyggml import worker


def test_devices_include_the_cpu_with_memory():
    devices = pyggml.devices()
    cpu = [d for d in devices if d.type == "cpu"]
    assert len(cpu) == 1
    assert cpu[0].memory_total > 0 and 0 < cpu[0].memory_free <= cpu[0].memory_total
    assert cpu[0].name and cpu[0].description and cpu[0].backend == "CPU"
    # ggml orders local accelerators before the CPU; RPC servers' devices join at the end
    assert [d for d in devices if d.backend != "RPC"][-1].type == "cpu"


def test_system_info_lists_backends_devices_and_cpu_features():
    info = pyggml.system_info()
    assert any(line.startswith("CPU : ") for line in info.splitlines())
    assert "LLAMAFILE = 1" in info and "REPACK = 1" in info
    assert "device 0:" in info
    features = pyggml.backend_features()["CPU"]
    assert any(name in features for name in ("AVX2", "NEON", "SSE3"))


def test_system_info_is_logged_as_structured_records(caplog):
    with caplog.at_level(logging.INFO, logger="pyggml"):
        pyggml.log_system_info()
    devices = [r for r in caplog.records if r.getMessage() == "device"]
    backends = [r for r in caplog.records if r.getMessage() == "backend"]
    assert any(r.type == "cpu" and r.memory_total > 0 for r in devices)
    assert any(r.backend == "CPU" and "LLAMAFILE" in r.features for r in backends)


def test_cpu_backend_threads_and_support_queries():
    threads = min(3, pyggml.cpus.available_cpus())
    with pyggml.cpu_backend(threads=threads) as backend, pyggml.Context() as ctx:
        assert backend.is_cpu and backend.threads == threads
        backend.set_threads(1)
        assert backend.threads == 1
        a = ctx.new_tensor("F32", (4, 8))
        assert backend.supports(a.mul_mat(ctx.new_tensor("F32", (2, 8))))
        assert "CPU" in repr(backend)


def test_build_info_records_the_patched_tree():
    info = json.loads(resources.files("pyggml").joinpath("build_info.json").read_text())
    # ON by default; a packager may build a portable library with it OFF
    assert info["options"]["GGML_NATIVE"] in ("ON", "1", "TRUE", "OFF", "0", "FALSE")
    tree = info["ggml_tree"]
    if tree is not None:      # null when built from a packager's own tree
        assert len(tree["tree_sha256"]) == 64
        assert tree["recipe"]["ggml_version"] == "0.25.3"
    assert resources.files("pyggml").joinpath("GGML-LICENSE").read_text().startswith("MIT")


def test_scheduler_places_nodes_where_told():
    import numpy as np

    cpu = pyggml.cpu_backend(threads=1)
    with pyggml.Scheduler([cpu]) as sched, pyggml.Context() as ctx:
        assert sched.backends == [cpu]
        x = ctx.new_tensor("F32", (8,)).set_input()
        y = x.exp().set_output()
        graph = ctx.graph(y)
        sched.place(y, cpu)
        sched.compute(graph, {x: np.zeros(8, np.float32)})
        assert sched.n_splits >= 1 and sched.buffer_size(cpu) > 0
        np.testing.assert_array_equal(y.numpy(), np.ones(8))


def test_logs_of_ggml_reach_python_logging(caplog):
    import logging

    with caplog.at_level(logging.DEBUG, logger="pyggml.ggml"):
        with pyggml.Context() as ctx:
            ctx.new_tensor("F32", (1 << 30, 1 << 30))      # 4 EiB: fails everywhere
            with pytest.raises(pyggml.GGMLError):
                ctx.allocate(pyggml.cpu_backend(threads=1))
    assert any("failed to allocate" in r.getMessage() for r in caplog.records
               if r.name == "pyggml.ggml")


def test_a_graph_is_measured_without_memory_as_it_is_allocated_with_it():
    cpu = pyggml.cpu_backend(threads=1)
    memory = cpu.device.buffer_type()
    with pyggml.Context(graphs=0) as storage, pyggml.Context() as ctx, \
            pyggml.Scheduler([cpu]) as sched:
        weight = storage.new_tensor("F32", (64, 32))
        x = ctx.new_tensor("F32", (16, 32)).set_input()
        y = weight.mul_mat(x).silu().mul_mat(weight.reshape(32, 64)).set_output()
        assert [s.op for s in y.sources()] == ["SILU", "RESHAPE"]
        graph = ctx.graph(y)
        with pyggml.Buffer.dummy(memory, [weight]):             # placed, but no memory
            assert weight.ptr.buffer != pyggml._ggml.ffi.NULL and weight.ptr.data == \
                pyggml._ggml.ffi.NULL
            measured = sched.reserve_size(graph)[cpu]
        assert weight.ptr.buffer == pyggml._ggml.ffi.NULL        # detached again
        buffers = pyggml.allocate(memory, [weight])
        assert len(buffers) == 1 and buffers[0].size >= memory.alloc_size(weight) == 64 * 32 * 4
        sched.reserve(graph)
        assert measured == sched.buffer_size(cpu) > 0


def test_the_cpu_keeps_one_thread_pool_and_counts_physical_cores():
    backend = pyggml.cpu_backend(threads=2)
    if pyggml.backend.uses_openmp():
        assert backend._pool is None                  # OpenMP brings its own threads
    else:
        first = backend._pool
        assert first is not None
        backend.set_threads(1)
        assert backend.threads == 1 and backend._pool is not None and backend._pool != first
    backend.close()
    assert backend._pool is None
    assert 1 <= pyggml.backend.default_threads() <= os.cpu_count()


def test_an_inline_scheduler_computes_from_the_calling_thread():
    """inline=True queues the graph from the caller (a GPU returns at once; the CPU's share
    runs in the call); wait() synchronizes. Same results as the worker thread's, where the
    second compute, allocated again, waits behind the first."""
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    found = {}
    for inline in (False, True):
        with pyggml.Scheduler([pyggml.cpu_backend(threads=1)], inline=inline) as sched, \
                pyggml.Context() as ctx:
            t = ctx.new_tensor("F32", (4, 6)).set_input()
            out = t.scale(2.0).set_output()
            graph = ctx.graph(out)
            sched.alloc(graph)
            t.set(x)
            workers = worker.alive()
            computation = sched.compute_async(graph)
            assert worker.alive() == workers + (not inline)   # started by the first
            sched.alloc(graph)                              # queued behind the last one
            t.set(x + 1)
            computation = sched.compute_async(graph)
            computation.wait()
            assert computation.done()
            found[inline] = out.numpy(copy=True)
    np.testing.assert_array_equal(found[False], 2 * (x + 1))
    np.testing.assert_array_equal(found[True], 2 * (x + 1))
