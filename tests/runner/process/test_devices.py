"""A runner subprocess whose layers live on a real RPC server (the placement flags, /load's
GPULayers and memory report), and what happens when that server is killed mid-stream."""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.support.rpc_servers import RPCServer, rpc_server
from tests.support.runner_process import RunnerProcess

LAYERS = 30          # SmolLM2's blocks; layer 30 is the output layer


@pytest.fixture(scope="module")
def server():
    with rpc_server(threads=2) as running:
        yield running


@pytest.fixture(scope="module")
def driven(model_paths, workdir, server):
    runner = RunnerProcess(model_paths["smollm2"], workdir, "--no-load", "--rpc", server.endpoint)
    yield runner
    runner.stop()


def load(runner, operation, **fields):
    return runner.client.post("/load", json={"Operation": operation, "KvSize": 512,
                                             "BatchSize": 128, **fields})


def rpc_id(runner) -> str:
    return next(d["id"] for d in runner.client.get("/info").json() if d["backend"] == "RPC")


def test_info_lists_the_rpc_device(driven, server):
    devices = driven.client.get("/info").json()
    remote = [d for d in devices if d["backend"] == "RPC"]
    assert len(remote) == 1 and remote[0]["description"] == server.endpoint
    assert remote[0]["total"] > 0 and remote[0]["name"].startswith("RPC")


def test_fit_reports_each_devices_layers_from_the_real_placement(driven):
    half = {"GPULayers": [{"id": rpc_id(driven), "backend": "RPC",
                           "Layers": list(range(15, LAYERS + 1))}]}
    memory = load(driven, 0, **half).json()["Memory"]
    cpu, (remote,) = memory["CPU"], memory["GPUs"]
    assert remote["Name"].startswith("RPC") and remote["Backend"] == "RPC"
    for layer in range(LAYERS + 1):
        here, there = (cpu, remote) if layer < 15 else (remote, cpu)
        assert here["Weights"][layer] > 0 and there["Weights"][layer] == 0, layer
        if layer < LAYERS:
            assert here["Cache"][layer] > 0 and there["Cache"][layer] == 0, layer
    assert cpu["Graph"] > 0 and remote["Graph"] > 0 and memory["InputWeights"] > 0
    everything = load(driven, 0).json()["Memory"]       # the runner's own default: all fit
    assert sum(everything["CPU"]["Weights"]) == 0 and all(everything["GPUs"][0]["Weights"])
    nothing = load(driven, 0, GPULayers=[]).json()["Memory"]
    assert nothing["GPUs"] == [] and all(nothing["CPU"]["Weights"])
    # what commit allocates is what fit measured
    assert load(driven, 2, **half).json()["Success"]
    committed = load(driven, 0, **half).json()["Memory"]
    assert committed == memory
    lines = driven.complete("The capital of France is",
                            Options={"temperature": 0, "num_predict": 6})
    assert "".join(line.get("content", "") for line in lines).startswith(" Paris.")
    assert load(driven, 3).json()["Success"]


def test_a_layout_that_does_not_fit_answers_success_false(driven):
    # 63 sequences of SmolLM2's whole context in f32, and a batch of 8192 whose attention
    # scores over all 516,096 cells alone take 150 GB: measured, never allocated
    huge = dict(Parallel=63, KvSize=63 * 8192, KvCacheType="f32", FlashAttention=False,
                BatchSize=8192)
    fit = load(driven, 0, **huge).json()
    if fit["Memory"]["Total"] < sum(d["free"] for d in driven.client.get("/info").json()):
        pytest.skip("this machine has room even for that")
    for operation in (1, 2):                                     # alloc, commit
        refused = load(driven, operation, **huge)
        body = refused.json()
        assert refused.status_code == 200 and body["Success"] is False, body
        assert "does not fit" in body["error"] and body["Memory"]["Total"] > 100e9
        assert driven.health()["status"] == 2
    bad = load(driven, 0, GPULayers=[{"id": "CUDA7", "Layers": [1]}])
    assert bad.status_code == 400 and "CUDA7" in bad.json()["error"]
    assert driven.health()["status"] == 2


def test_killing_the_rpc_server_mid_stream_ends_the_request_and_spares_the_runner(
        model_paths, workdir):
    doomed = RPCServer(threads=2)
    runner = RunnerProcess(model_paths["smollm2"], workdir, "--rpc", doomed.endpoint,
                           "--ctx-size", "2048")
    try:
        runner.wait_status(0)
        body = {"Prompt": "Count: 1, 2, 3,", "Options": {"temperature": 0, "num_predict": 1500}}
        lines = []
        with runner.client.stream("POST", "/completion", json=body) as response:
            for line in response.iter_lines():
                lines.append(json.loads(line))
                if len(lines) == 5:
                    doomed.kill()
        assert "content" in lines[0] and "error" in lines[-1], lines[-3:]
        assert "stopped answering" in lines[-1]["error"] and len(lines) < 1000
        started = time.monotonic()
        health = runner.health()
        assert health["status"] == 5 and doomed.endpoint in health["error"]
        refused = runner.client.post("/completion", json=body)
        assert refused.status_code == 503 and "stopped answering" in refused.json()["error"]
        assert time.monotonic() - started < 5 and runner.proc.poll() is None
        # the server comes back on the same port: close and commit load the model again
        doomed = RPCServer(2, "--port", str(doomed.port))
        assert runner.client.post("/load", json={"Operation": 3}).json()["Success"]
        assert runner.client.post("/load", json={"Operation": 2}).json()["Success"]
        again = runner.complete("The capital of France is",
                                Options={"temperature": 0, "num_predict": 3})
        assert "".join(line.get("content", "") for line in again).startswith(" Paris.")
    finally:
        runner.stop()
        doomed.kill()


def test_a_runner_whose_compute_never_returns_still_exits_when_told_to(model_paths, workdir):
    """An RPC server that stops (SIGSTOP) mid-stream leaves the runner's graph waiting for
    it for ever, and its batch loop with it: the runner used to wait for that loop on
    SIGTERM and never exit (a runner of a model whose rope spun outlived its server by an
    hour, spinning). It exits once its grace and a margin have passed."""
    stopped = RPCServer(threads=2)
    runner = RunnerProcess(model_paths["smollm2"], workdir, "--rpc", stopped.endpoint,
                           "--ctx-size", "2048", "--grace", "1")
    try:
        runner.wait_status(0)
        body = {"Prompt": "Count: 1, 2, 3,", "Options": {"temperature": 0, "num_predict": 1500}}
        with runner.client.stream("POST", "/completion", json=body) as response:
            for n, _ in enumerate(response.iter_lines()):
                if n == 5:
                    stopped.proc.send_signal(signal.SIGSTOP)
                    break
        runner.proc.send_signal(signal.SIGTERM)
        assert runner.proc.wait(60) == 1
        assert "did not stop within" in runner.log.read_text()
    finally:
        stopped.proc.send_signal(signal.SIGCONT)
        runner.stop()
        stopped.kill()
