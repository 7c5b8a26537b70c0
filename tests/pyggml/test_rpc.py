"""ggml's RPC backend through pyggml: a real `python -m pyggml rpc-server` on loopback."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

import pyggml
from pyggml import GGMLError

from tests.support.rpc_servers import free_port, rpc_server

pytestmark = pytest.mark.server          # the module's tests start RPC servers


@pytest.fixture(scope="module")
def server():
    with rpc_server() as running:
        yield running


def test_connect_adds_the_servers_device(server):
    devices = pyggml.rpc.connect(server.endpoint)
    assert len(devices) == 1
    device = devices[0]
    assert device.name.startswith("RPC") and device.type == "gpu"
    assert device.endpoint == server.endpoint and device.memory_total > 0
    assert device.name in [d.name for d in pyggml.devices()]
    again = pyggml.rpc.connect(server.endpoint)                      # once per endpoint
    assert [(d.index, d.name) for d in again] == [(d.index, d.name) for d in devices]


def test_weights_and_ops_live_on_the_remote_device(server):
    device = pyggml.rpc.connect(server.endpoint)[0]
    remote = device.open()
    assert not remote.is_cpu and remote.failure() is None
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((5, 8), np.float32), rng.standard_normal((3, 8), np.float32)
    with pyggml.Context(graphs=0) as storage, pyggml.Context() as ctx, \
            pyggml.Scheduler([remote]) as sched:
        weight = storage.new_tensor("F32", (5, 8))
        buffer = storage.allocate(remote)
        buffer.mark_weights()              # the scheduler runs an op where its weights are
        assert not buffer.is_host and buffer.name.startswith("RPC")
        weight.set(w)
        inp = ctx.new_tensor("F32", (3, 8)).set_input()
        product = weight.mul_mat(inp)
        out = product.silu().set_output()
        sched.place(out, sched.backends[-1])        # the CPU, though its operand is remote
        graph = ctx.graph(out)
        sched.compute(graph, {inp: x})
        assert sched.backend_of(product) is remote
        assert sched.backend_of(out) is sched.backends[-1] and sched.n_splits == 2
        expected = x @ w.T
        np.testing.assert_allclose(out.numpy(), expected / (1 + np.exp(-expected)), rtol=1e-5)
        np.testing.assert_array_equal(weight.numpy(), w)           # read back over the wire
        into = weight.host_array()             # no pinned memory over RPC: plain numpy
        assert into.shape == (5, 8) and into.dtype == np.float32
        assert weight.numpy(out=into) is into
        np.testing.assert_array_equal(into, w)
        rows = weight.host_array((9, 8))[:5]                 # the first rows of a larger one
        np.testing.assert_array_equal(weight.numpy(out=rows), w)


def test_an_inline_scheduler_queues_a_graph_behind_its_last_compute(server):
    """Over a device that queues work (RPC, as a GPU), computing the graph allocated last
    again does not wait for its compute in flight: each compute takes its inputs as it
    starts, and the device runs them in order (each adds to what the last one wrote)."""
    remote = pyggml.rpc.connect(server.endpoint)[0].open()
    with pyggml.Context(graphs=0) as storage, pyggml.Context() as ctx, \
            pyggml.Scheduler([remote], inline=True) as sched:
        total = storage.new_tensor("F32", (4,))
        storage.allocate(remote).clear(0)
        step = ctx.new_tensor("F32", (4,)).set_input()
        added = ctx.bind(total).add(step)
        sched.place(added, remote)
        graph = ctx.graph(added.cpy(ctx.bind(total)))
        computations = []
        for k in range(1, 6):
            sched.alloc(graph)
            step.set(np.full(4, k, np.float32))
            computations.append(sched.compute_async(graph))
        assert not any(c.done() for c in computations)      # none was waited for
        sched.wait()
        np.testing.assert_array_equal(total.numpy(), np.full(4, 15, np.float32))


def test_graphs_split_over_two_backends_are_taken_in_turn(server):
    """Two graphs, each split between the remote device and the CPU, allocated and computed
    in turn (as an engine keeps a graph per shape): each is split again from the operands it
    was built with, since the scheduler's copies of the last split are gone."""
    remote = pyggml.rpc.connect(server.endpoint)[0].open()
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 8)).astype(np.float32)
    with pyggml.Context(graphs=0) as storage, pyggml.Scheduler([remote]) as sched:
        weight = storage.new_tensor("F32", (6, 8))
        storage.allocate(remote).mark_weights()
        weight.set(w)
        graphs = []
        for rows in (3, 5):
            ctx = pyggml.Context()
            inp = ctx.new_tensor("F32", (rows, 8)).set_input()
            product = ctx.bind(weight).mul_mat(inp)                   # remote
            out = product.silu().scale(2.0).set_output()
            sched.place(out, sched.backends[-1])                   # the CPU: a copy between
            graphs.append((ctx, ctx.graph(out), inp, out))
        for turn in range(6):
            ctx, graph, inp, out = graphs[turn % 2]
            x = rng.standard_normal(inp.shape).astype(np.float32)
            sched.compute(graph, {inp: x})
            assert sched.n_splits == 2
            expected = x @ w.T
            np.testing.assert_allclose(out.numpy(), 2 * expected / (1 + np.exp(-expected)),
                                       **served_product_tolerance())
        for ctx, *_ in graphs:
            ctx.close()


def test_an_unreachable_server_is_an_error_within_seconds():
    start = time.monotonic()
    with pytest.raises(GGMLError, match="cannot be reached"):
        pyggml.rpc.connect(f"127.0.0.1:{free_port()}")
    with pytest.raises(GGMLError, match="cannot be reached"):
        pyggml.rpc.connect("10.255.255.1:50052")       # routes nowhere: the connect times out
    assert time.monotonic() - start < 15


@pytest.mark.parametrize("endpoint", ["localhost", "host:port", ":50052", "h:0", "h:70000"])
def test_a_malformed_endpoint_is_refused(endpoint):
    with pytest.raises(ValueError, match="host:port"):
        pyggml.rpc.connect(endpoint)


def test_a_server_that_goes_away_fails_the_compute_not_the_process():
    with rpc_server() as doomed:
        remote = pyggml.rpc.connect(doomed.endpoint)[0].open()
        with pyggml.Context(graphs=0) as storage, pyggml.Context() as ctx, \
                pyggml.Scheduler([remote]) as sched:
            weight = storage.new_tensor("F32", (4, 4))
            storage.allocate(remote)
            weight.set(np.eye(4, dtype=np.float32))
            inp = ctx.new_tensor("F32", (1, 4)).set_input()
            out = weight.mul_mat(inp).set_output()
            graph = ctx.graph(out)
            sched.compute(graph, {inp: np.ones((1, 4), np.float32)})
            np.testing.assert_array_equal(out.numpy(), np.ones((1, 4)))
            doomed.kill()
            with pytest.raises(GGMLError, match="stopped answering"):
                sched.compute(graph, {inp: np.ones((1, 4), np.float32)})
                out.numpy()
                sched.check()
            assert "stopped answering" in remote.failure()
    with pyggml.Context() as ctx, pyggml.Scheduler() as local:     # the process goes on
        x = ctx.new_tensor("F32", (2,)).set_input()
        y = x.exp()
        local.compute(ctx.graph(y), {x: np.zeros(2, np.float32)})
        np.testing.assert_array_equal(y.numpy(), np.ones(2))


def test_serving_beyond_loopback_warns_that_there_is_no_authentication():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pyggml", "rpc-server", "--host", "0.0.0.0",
                             "--port", str(port), "--threads", "1"], cwd="/",
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:                      # a CUDA build without a driver says so first: read past it
        lines = [proc.stderr.readline()]
        while lines[-1] and "no authentication" not in lines[-1] and len(lines) < 20:
            lines.append(proc.stderr.readline())
    finally:
        proc.kill()
        proc.wait()
    assert "WARNING" in lines[-1] and "no authentication" in lines[-1], lines


def test_rpc_server_refuses_an_unknown_device_and_a_taken_port(server):
    run = [sys.executable, "-m", "pyggml", "rpc-server", "--threads", "1"]
    unknown = subprocess.run(run + ["--device", "NOPE0"], cwd="/", capture_output=True,
                             text=True, timeout=60)
    assert unknown.returncode == 1 and "No device named 'NOPE0'" in unknown.stderr
    taken = subprocess.run(run + ["--port", str(server.port)], cwd="/", capture_output=True,
                           text=True, timeout=60)
    assert taken.returncode == 1 and "Cannot listen" in taken.stderr


def test_a_node_placed_on_another_backend_of_a_device_runs_on_the_schedulers(server):
    """A context places nodes on a device's backend; a scheduler runs them on its own backend
    of that device, and a device it does not run is an error, not ggml's abort."""
    elsewhere = pyggml.rpc.connect(server.endpoint)[0].open()
    with pyggml.Context() as ctx:
        x = ctx.new_tensor("F32", (8,)).set_input()
        y = x.exp().set_output()
        graph = ctx.graph(y)
        ctx.place(y, pyggml.cpu_backend(threads=1))             # not the scheduler's own
        with pyggml.Scheduler([pyggml.cpu_backend(threads=1)]) as sched:
            sched.compute(graph, {x: np.zeros(8, np.float32)})
            assert sched.backend_of(y) is sched.backends[0]
            np.testing.assert_array_equal(y.numpy(), np.ones(8))
        ctx.place(y, elsewhere)
        with pyggml.Scheduler([pyggml.cpu_backend(threads=1)]) as sched:
            with pytest.raises(pyggml.GGMLError, match="placed on RPC.*which this scheduler "
                                                        "does not run"):
                sched.alloc(graph)
            ctx.place(y, sched.backends[0])
            sched.compute(graph, {x: np.zeros(8, np.float32)})     # it serves on
            np.testing.assert_array_equal(y.numpy(), np.ones(8))


def served_product_tolerance() -> dict:
    """assert_allclose's tolerance of a float32 product on the device an RPC server on this
    machine serves: its first GPU (CUDA's products take float32 operands through TF32 or
    float16, as ggml's default precision lets it), else the CPU."""
    gpu = any(d.type in ("gpu", "igpu") and d.backend != "RPC" for d in pyggml.devices())
    return {"rtol": 2e-3, "atol": 2e-2} if gpu else {"rtol": 1e-5, "atol": 1e-6}
