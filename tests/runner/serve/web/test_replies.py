"""The SSE streams (OpenAI's, Anthropic's, Responses') answer at once: their headers go out
before the model has loaded or read the prompt, and while it does, each sends what its API
allows to keep a connection alive (a comment; Anthropic's ping events). A failure after the
headers comes in the stream, in the API's own shape. Ollama's NDJSON streams, where no line
may be blank, send their headers once the runner has taken the request: a refusal keeps its
status, and neither a long prompt nor a wait for a slot holds the headers back (Ollama's wait
for the first token). RUNNER_KEEPALIVE is set tiny here, so that every wait is long enough
for keep-alives whatever the machine's speed (a model load alone is longer)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.server import ServerProcess

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture()
def quick(models_dir, tmp_path):
    server = ServerProcess(models_dir, tmp_path, RUNNER_KEEPALIVE="0.001")
    yield server
    server.stop()


def lines(server, path: str, body: dict) -> tuple[int, list[str]]:
    with server.client.stream("POST", path, json=body) as response:
        return response.status_code, [line for line in response.iter_lines() if line]


def test_openai_streams_send_comments_until_the_first_chunk(quick):
    status, got = lines(quick, "/v1/chat/completions", {
        "model": "tiny-qwen", "messages": QUESTION, "stream": True, "max_tokens": 3})
    first = next(i for i, line in enumerate(got) if line.startswith("data: "))
    assert status == 200 and first > 0 and all(line == ": keep-alive" for line in got[:first])
    assert got[-1] == "data: [DONE]"


def test_anthropic_streams_send_pings(quick):
    status, got = lines(quick, "/v1/messages", {
        "model": "tiny-qwen", "messages": QUESTION, "stream": True, "max_tokens": 3})
    events = [line.removeprefix("event: ") for line in got if line.startswith("event: ")]
    assert status == 200 and events[0] == "message_start" and "ping" in events
    assert events[-1] == "message_stop"


def test_responses_streams_send_comments(quick):
    status, got = lines(quick, "/v1/responses", {
        "model": "tiny-qwen", "input": "Hi", "stream": True, "max_output_tokens": 3})
    assert status == 200 and ": keep-alive" in got
    assert got[-1].startswith("data: ") and "response.incomplete" in got[-1] or \
        "response.completed" in got[-1]


def test_a_refusal_after_the_headers_comes_in_the_stream(quick):
    long = [{"role": "user", "content": "word " * 5000}]        # beyond tiny-qwen's context
    options = {"num_ctx": 256}
    whole = quick.client.post("/api/chat", json={"model": "tiny-qwen", "messages": long,
                                                 "stream": False, "options": options,
                                                 "truncate": False})
    assert whole.status_code == 400
    # Ollama's own API keeps its statuses (its clients read them): the runner refuses before
    # it takes the request
    status, got = lines(quick, "/api/chat", {"model": "tiny-qwen", "messages": long,
                                             "options": options, "truncate": False})
    assert status == 400 and json.loads(got[-1])["error"] == whole.json()["error"]
    status, got = lines(quick, "/v1/messages", {"model": "tiny-qwen", "messages": long,
                                                "stream": True, "max_tokens": 3})
    error = json.loads(got[-1].removeprefix("data: "))
    assert status == 200 and error["type"] == "error" and error["error"]["message"]


def test_ollama_streams_send_headers_before_the_first_token(models_dir, tmp_path):
    """One slot, busy with a long reply: a second streamed request waits for it in the
    runner, and its headers come at once, while the first reply still streams."""
    server = ServerProcess(models_dir, tmp_path, RUNNER_NUM_PARALLEL=1)
    busy = {"model": "smollm2:135m", "prompt": "Count: 1, 2, 3,", "raw": True,
            "options": {"num_predict": 30000, "temperature": 0}}
    try:
        with server.client.stream("POST", "/api/generate", json=busy) as first:
            replies = first.iter_lines()
            assert "response" in json.loads(next(replies))
            with httpx.Client(base_url=server.url, timeout=300) as other, \
                    other.stream("POST", "/api/chat", json={"model": "smollm2:135m",
                                                            "messages": QUESTION}) as second:
                assert second.status_code == 200
                assert second.headers["content-type"] == "application/x-ndjson"
                assert not json.loads(next(replies))["done"]        # the slot is still busy
    finally:
        server.stop()
