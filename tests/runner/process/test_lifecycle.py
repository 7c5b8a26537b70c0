"""A runner started with --no-load and --parallel 1: the /load operations, health while
busy, and a graceful SIGTERM."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading

import pytest

from tests.support.runner_process import RunnerProcess


@pytest.fixture(scope="module")
def driven(model_paths, workdir):
    runner = RunnerProcess(model_paths["smollm2"], workdir, "--no-load", "--grace", "2")
    yield runner
    runner.stop()


def load(runner, operation, **fields):
    return runner.client.post("/load", json={"Operation": operation, **fields})


def test_load_fit_alloc_commit_close(driven):
    assert driven.health()["status"] == 2                         # launched, nothing loaded
    refused = driven.client.post("/completion", json={"Prompt": "Hi"})
    assert refused.status_code == 503 and "POST /load" in refused.json()["error"]
    layout = {"Parallel": 1, "BatchSize": 256, "KvSize": 2048, "FlashAttention": False}
    fit = load(driven, 0, **layout).json()
    cpu = fit["Memory"]["CPU"]
    assert fit["Success"] and len(cpu["Weights"]) == 31 and len(cpu["Cache"]) == 31
    assert all(w > 0 for w in cpu["Weights"][:30]) and cpu["Cache"][0] > 0
    assert driven.health()["status"] == 2                         # fit allocated nothing
    assert load(driven, 1, **layout).json()["Success"]
    committed = load(driven, 2, **layout).json()
    assert committed["Success"] and driven.health() == {"status": 0, "progress": 1.0}
    measured = committed["Memory"]["CPU"]
    assert measured["Cache"] == cpu["Cache"]                      # exact before loading
    assert 0 < measured["Graph"] <= cpu["Graph"]                  # the estimate bounds it
    assert driven.complete("Hi", Options={"num_predict": 2})[-1]["done"]
    assert load(driven, 2, **layout).status_code == 400           # already loaded
    assert load(driven, 3).json()["Success"] and driven.health()["status"] == 2
    bad = load(driven, 0, KvCacheType="q4_0", FlashAttention=False)
    assert bad.status_code == 400 and "flash attention" in bad.json()["error"]
    assert load(driven, 2, Parallel=1, KvSize=1024).json()["Success"]
    driven.wait_status(0)


def test_health_reports_no_free_slot_while_busy(driven):
    body = {"Prompt": "1, 2, 3, 4, 5,", "Options": {"temperature": 0, "num_predict": 64}}
    with driven.client.stream("POST", "/completion", json=body) as response:
        lines = response.iter_lines()
        first = json.loads(next(lines))
        assert driven.health()["status"] == 1
        queued = threading.Thread(target=driven.complete, args=("Hi",),
                                  kwargs={"Options": {"num_predict": 2}})
        queued.start()                              # waits its turn: not refused
        rest = [json.loads(line) for line in lines if line]
    queued.join(60)
    assert "content" in first
    assert not queued.is_alive() and rest[-1]["eval_count"] == 64


def test_closing_the_model_ends_streams_with_an_error_line(driven):
    endless = {"Prompt": "1, 2, 3, 4, 5,", "Options": {"temperature": 0, "num_predict": -1}}
    with driven.client.stream("POST", "/completion", json=endless) as response:
        lines = response.iter_lines()
        assert "content" in json.loads(next(lines))
        assert load(driven, 3).json()["Success"]
        rest = [json.loads(line) for line in lines if line]
    assert rest[-1] == {"error": "The model was closed."}
    assert driven.health() == {"status": 2, "progress": 0.0}
    assert load(driven, 2, Parallel=1, KvSize=1024).json()["Success"]


def test_sigterm_finishes_short_streams_ends_long_ones_and_exits_0(driven):
    short = {"Prompt": "10, 20, 30,", "Options": {"temperature": 0, "num_predict": 24}}
    endless = {"Prompt": "1, 2, 3, 4, 5,", "Options": {"temperature": 0, "num_predict": -1}}
    load(driven, 3)
    assert load(driven, 2, Parallel=2, KvSize=2048).json()["Success"]
    with driven.client.stream("POST", "/completion", json=endless) as long_response, \
            driven.client.stream("POST", "/completion", json=short) as short_response:
        long_lines, short_lines = long_response.iter_lines(), short_response.iter_lines()
        assert "content" in json.loads(next(long_lines))
        assert "content" in json.loads(next(short_lines))
        driven.proc.send_signal(signal.SIGTERM)
        short_rest = [json.loads(line) for line in short_lines if line]
        long_rest = [json.loads(line) for line in long_lines if line]
    assert short_rest[-1]["done"] and short_rest[-1]["eval_count"] == 24
    assert long_rest[-1].get("error", "").startswith("The runner is shutting down")
    assert driven.proc.wait(30) == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(driven.url.rsplit(":", 1)[1])), 1)


def test_a_port_in_use_is_a_clear_error(model_paths, workdir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "runner", "--model",
                                 str(model_paths["smollm2"]), "--port", str(port)],
                                cwd=workdir, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in result.stderr


@pytest.mark.server
@pytest.mark.parametrize("op", [None, 0])
def test_a_malformed_file_is_a_load_error_naming_its_key(workdir, op):
    """rope.dimension_count past the head made ggml assert (SIGABRT) at the first batch; the
    runner now refuses the file as it reads it: loading at start, health says so (status 5,
    error); driven (--no-load), /load's fit answers 400 with the sentence."""
    import numpy as np

    from tests.support.gguf_edit import rewrite
    from tests.support.tiny import llama_tensors, write_llama

    plain = write_llama(workdir / "plain.gguf", llama_tensors(np.random.default_rng(0)))
    path = rewrite(plain, workdir / "malformed.gguf",
                   values={"llama.rope.dimension_count": 512})
    sentence = "llama.rope.dimension_count is 512, larger than the head (8)"
    runner = RunnerProcess(path, workdir, *(() if op is None else ("--no-load",)))
    try:
        if op is None:
            runner.wait_status(5, timeout=60)
            assert sentence in runner.health()["error"]
        else:
            refused = load(runner, op, KvSize=256, BatchSize=64)
            assert refused.status_code == 400 and sentence in refused.json()["error"]
        assert runner.proc.poll() is None
    finally:
        runner.stop()
