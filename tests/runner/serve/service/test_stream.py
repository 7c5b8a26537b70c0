"""A model's lease is returned on every path: a request refused at the door never leases, and
a client that leaves, streaming or not, cancels its generation and frees the model at once
(here: `keep_alive: 0` unloads it while the abandoned generation would still run for minutes)."""

from __future__ import annotations

import json
import socket

import pytest

from tests.support.server import ServerProcess
from tests.support.server import eventually, loaded

SMOL = "smollm2:135m"
# about 30000 tokens of counting: minutes on any machine, unless cancelled
ENDLESS = {"model": SMOL, "prompt": "Count: 1, 2, 3,", "raw": True,
           "options": {"num_predict": 30000, "temperature": 0}}


@pytest.fixture
def single(models_dir, workdir):
    server = ServerProcess(models_dir, workdir, RUNNER_NUM_PARALLEL=1,
                           RUNNER_MAX_LOADED_MODELS=1)
    yield server
    assert server.stop() == 0


def abandon(server: ServerProcess, path: str, body: dict) -> None:
    """Send a request, wait until its model is loaded (it holds the lease), and leave."""
    payload = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as connection:
        connection.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                           f"application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
                           .encode() + payload)
        assert eventually(lambda: loaded(server) == [SMOL], timeout=120)


def unloads(server: ServerProcess) -> bool:
    answer = server.client.post("/api/generate", json={"model": SMOL, "keep_alive": 0})
    assert answer.status_code == 200 and answer.json()["done_reason"] == "unload"
    return eventually(lambda: loaded(server) == [] and server.runner_pids() == [], timeout=60)


@pytest.mark.parametrize("path, body", [
    ("/api/generate", dict(ENDLESS, stream=False)),
    ("/api/generate", dict(ENDLESS, stream=True)),
    ("/v1/completions", {"model": SMOL, "prompt": "Count: 1, 2, 3,", "max_tokens": 30000,
                         "temperature": 0}),
    ("/v1/chat/completions", {"model": SMOL, "max_tokens": 30000, "temperature": 0,
                              "stream": True, "messages": [{"role": "user",
                                                            "content": "Count to 100000."}]}),
], ids=["generate", "generate streamed", "openai completion", "openai chat streamed"])
def test_a_client_that_leaves_frees_its_model(single, path, body):
    abandon(single, path, body)
    assert unloads(single)
    again = single.client.post("/api/generate", json={"model": SMOL, "prompt": "Hi",
                                                      "stream": False,
                                                      "options": {"num_predict": 2}})
    assert again.status_code == 200 and again.json()["eval_count"] == 2


def test_a_request_refused_at_the_door_holds_no_lease(single):
    for _ in range(3):
        refused = single.client.post("/v1/chat/completions", json={
            "model": SMOL, "stream": True, "stream_options": 5,
            "messages": [{"role": "user", "content": "Hi"}]})
        assert refused.status_code == 400 and "stream_options" in refused.text
    assert single.client.post("/api/generate", json={"model": SMOL}).json()["done_reason"] \
        == "load"
    assert unloads(single)
