"""Bad requests over both APIs: the documented status and a message, and the server serving
the next request as before."""

from __future__ import annotations

import pytest

SMOL = "smollm2:135m"
NATIVE = [
    ("/api/generate", b"{not json", 400, "invalid JSON"),
    ("/api/generate", b"", 400, "missing request body"),
    ("/api/generate", b"[1, 2]", 400, "JSON object"),
    ("/api/generate", {"prompt": "hi"}, 400, "model is required"),
    ("/api/generate", {"model": 5, "prompt": "hi"}, 400, "wrong type"),
    ("/api/generate", {"model": "nosuch", "prompt": "hi"}, 404, "try pulling it first"),
    ("/api/generate", {"model": SMOL, "prompt": "hi", "options": {"top_k": "many"}}, 400,
     "top_k"),
    ("/api/generate", {"model": SMOL, "prompt": "hi", "options": {"num_ctx": "big"}}, 400,
     "num_ctx"),
    ("/api/generate", {"model": SMOL, "prompt": "hi", "keep_alive": "-1"}, 400,
     "invalid duration"),
    ("/api/generate", {"model": SMOL, "prompt": "hi", "keep_alive": "soon"}, 400,
     "invalid duration"),
    ("/api/generate", {"model": SMOL, "prompt": "hi", "format": {"type": "nonsense"}}, 400,
     "cannot be enforced"),
    ("/api/generate", {"model": SMOL, "prompt": "hi", "raw": True, "system": "x"}, 400,
     "raw mode"),
    ("/api/generate", {"model": SMOL, "prompt": "hi", "images": ["aGk="]}, 400,
     "does not support images"),
    ("/api/generate", {"model": SMOL, "prompt": "word " * 9000, "truncate": False,
                       "options": {"num_ctx": 256}}, 400, "context"),
    ("/api/generate", {"model": SMOL, "prompt": "hi", "top_logprobs": 50}, 400,
     "top_logprobs"),
    ("/api/generate", {"model": SMOL, "prompt": "hi", "think": "loud"}, 400, "think must be"),
    ("/api/chat", {"model": SMOL, "messages": "hello"}, 400, "wrong type"),
    ("/api/chat", {"model": SMOL, "messages": [{"role": "wizard", "content": "x"}]}, 400,
     "role"),
    ("/api/chat", {"model": SMOL, "messages": [5]}, 400, "message"),
    ("/api/chat", {"model": "tiny-bert", "messages": [{"role": "user", "content": "x"}]}, 400,
     "does not support chat"),
    ("/api/embed", {"model": "tiny-bert", "input": [1, 2]}, 400, "invalid input type"),
    ("/api/embed", {"model": "tiny-bert", "input": "x", "dimensions": -3}, 400, "dimensions"),
    ("/api/embed", {"model": SMOL, "input": "x"}, 400, "embeddings"),
    ("/api/show", {"model": "nosuch"}, 404, "not found"),
    ("/api/copy", {"source": "nosuch", "destination": "x"}, 404, "not found"),
    ("/api/copy", {"source": SMOL, "destination": "bad name!"}, 400, "not a model name"),
    ("/api/delete", {"model": "nosuch"}, 404, "not found"),
    ("/api/create", {"model": "x"}, 400, "neither"),
    ("/api/pull", {"model": "nosuch:7b"}, 404, "not a model"),
    ("/api/blobs/sha256:zz", b"data", 400, "invalid digest"),
]
OPENAI = [
    ("/v1/chat/completions", b"{", 400, "invalid JSON"),
    ("/v1/chat/completions", {"model": SMOL, "messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"model": "nosuch", "messages": [{"role": "user",
                                                               "content": "x"}]}, 404,
     "not found"),
    ("/v1/chat/completions", {"model": SMOL, "messages": [{"role": "user", "content": "x"}],
                              "response_format": {"type": "yaml"}}, 400, "response_format"),
    ("/v1/chat/completions", {"model": SMOL, "messages": [{"role": "user", "content": "x"}],
                              "reasoning_effort": "extreme"}, 400, "reasoning_effort"),
    ("/v1/chat/completions", {"model": SMOL, "messages": [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "function": {"name": "f", "arguments": "{bad"}}]}]}, 400,
     "arguments"),
    ("/v1/completions", {"model": SMOL, "prompt": ["a", "b"]}, 400, "wrong type"),
    ("/v1/embeddings", {"model": "tiny-bert", "input": [[1, 2]]}, 400, "token arrays"),
    ("/v1/embeddings", {"model": "tiny-bert", "input": "x", "encoding_format": "hex"}, 400,
     "encoding_format"),
    ("/v1/models/nosuch", None, 404, "not found"),
]


@pytest.mark.parametrize("path, body, status, message", NATIVE + OPENAI,
                         ids=[f"{p} {m}" for p, _, _, m in NATIVE + OPENAI])
def test_a_bad_request_gets_its_status_and_message(server, path, body, status, message):
    method = "DELETE" if path == "/api/delete" else "POST"
    if body is None:
        response = server.client.get(path)
    elif isinstance(body, bytes):
        response = server.client.request(method, path, content=body)
    else:
        response = server.client.request(method, path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    text = error["message"] if path.startswith("/v1/") else error
    if path.startswith("/v1/"):
        assert error["type"] == {400: "invalid_request_error", 404: "not_found_error"}[status]
    assert message.lower() in text.lower(), text
    ok = server.client.post("/api/generate", json={"model": SMOL, "prompt": "Hi",
                                                   "stream": False,
                                                   "options": {"num_predict": 1}})
    assert ok.status_code == 200 and ok.json()["done"]


def test_a_hostile_template_costs_its_own_request_only(server):
    import threading

    hostile = {"model": SMOL, "prompt": "hi", "stream": False, "template":
               "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"}
    answers = []
    thread = threading.Thread(target=lambda: answers.append(
        server.client.post("/api/generate", json=hostile)))
    thread.start()
    served_meanwhile = 0                  # the render takes 5 s; a blocked loop serves none
    while thread.is_alive():
        assert server.client.get("/api/version").status_code == 200
        served_meanwhile += 1
    assert served_meanwhile >= 50
    assert answers[0].status_code == 400 and "ran longer" in answers[0].json()["error"]
