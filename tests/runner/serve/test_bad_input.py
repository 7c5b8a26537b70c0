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
    ("/api/pull", {"model": "bad name!", "stream": False}, 400, "not a model name"),
    ("/api/pull", {"model": "http://127.0.0.1:1/ns/m", "stream": False}, 400, "--insecure"),
    ("/api/blobs/sha256:zz", b"data", 400, "invalid digest"),
    # the probes: hostile or unlucky bodies
    ("/api/generate", b'{"model": "smollm2:135m", "prompt": "\\ud800"}', 400, "invalid JSON"),
    ("/api/chat", b'{"model": "x", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     400, "invalid JSON"),
    ("/api/generate", b'{"model": "smollm2:135m", "options": {"temperature": NaN}}', 400,
     "invalid JSON"),
    ("/api/generate", b'{"model": "smollm2:135m", "options": {"top_p": Infinity}}', 400,
     "invalid JSON"),
    ("/api/generate", {"model": SMOL, "prompt": "hi", "options": {"repeat_penalty": 0}}, 400,
     "repeat_penalty"),
    ("/api/generate", {"model": SMOL, "prompt": "hi", "options": {"use_mmap": "x"}}, 400,
     "use_mmap"),
    ("/api/generate", {"model": SMOL, "prompt": "hi", "keep_alive": [1]}, 400, "keep_alive"),
    ("/api/chat", {"model": SMOL, "messages": [{"role": {"name": "user"}, "content": "x"}]},
     400, "messages.0.role"),
    ("/api/chat", {"model": "tiny-qwen", "messages": [{"role": "user", "content": "x"}],
                   "tools": [{"type": "function", "function": {"description": "no name"}}]},
     400, "tools.0.function.name"),
    ("/api/chat", {"model": "tiny-qwen", "messages": [{"role": "user", "content": "x"}],
                   "tools": "all of them"}, 400, "tools"),
    ("/api/generate", {"model": "m" * 5000, "prompt": "hi"}, 404, "not found"),
    ("/api/show", {"model": "m" * 5000}, 400, "model"),
    ("/api/copy", {"source": SMOL, "destination": "d" * 300}, 400, "not a model name"),
    ("/api/create", {"model": "x", "from": "smollm2:135m", "parameters": ["temperature"]}, 400,
     "parameters"),
    ("/api/create", {"model": "x", "files": {"a.gguf": "sha256:" + "0" * 64}}, 400,
     "not found"),
    ("/api/generate", {"model": "/etc/hostname.gguf", "prompt": "hi"}, 404, "not found"),
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
    ("/v1/completions", {"model": SMOL, "prompt": []}, 400, "empty array"),
    ("/v1/completions", {"model": SMOL, "prompt": ["0", ""], "max_tokens": 2}, 400,
     "prompt is empty"),
    ("/v1/embeddings", {"model": "tiny-bert", "input": "x", "encoding_format": "hex"}, 400,
     "encoding_format"),
    ("/v1/models/nosuch", None, 404, "not found"),
    ("/v1/chat/completions", {"model": SMOL, "messages": [{"role": "user", "content": "x"}],
                              "stream_options": "yes"}, 400, "stream_options"),
    ("/v1/completions", {"model": SMOL, "prompt": "x", "stream_options": [1]}, 400,
     "stream_options"),
    ("/v1/chat/completions", {"model": SMOL, "messages": [{"role": "user", "content": "x"}],
                              "max_tokens": "ten"}, 400, "max_tokens"),
    ("/v1/chat/completions", {"model": SMOL, "messages": [{"role": "user", "content": "x"}],
                              "temperature": 7}, 400, "temperature"),
    ("/v1/chat/completions", {"model": SMOL, "messages": [{"role": "user", "content": "x"}],
                              "tools": [{"type": "function"}]}, 400, "function"),
    ("/v1/chat/completions", {"model": SMOL, "messages": [{"role": "user", "content": "x"}],
                              "tool_choice": "required"}, 400, "needs tools"),
    ("/v1/chat/completions", {"model": SMOL, "messages": [{"role": "user", "content": "x"}],
                              "tool_choice": {"type": "function",
                                              "function": {"name": "ghost"}},
                              "tools": [{"type": "function", "function": {"name": "real"}}]},
     400, "not among the tools"),
    ("/v1/chat/completions", {"model": SMOL, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]}, 400,
     "data:image"),
    ("/v1/chat/completions", {"model": SMOL, "messages": [{"role": "wizard",
                                                           "content": "x"}]}, 400, "role"),
    ("/v1/embeddings", {"model": "tiny-bert", "input": "x", "dimensions": 0}, 400,
     "dimensions"),
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
    assert served_meanwhile >= 50, served_meanwhile          # 467 here, 2 cores
    assert answers[0].status_code == 400 and "ran longer" in answers[0].json()["error"]


def test_a_gguf_path_that_is_not_gguf_is_a_400_everywhere(server, tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF but nothing after it")
    for path, body in (("/api/generate", {"model": str(fake), "prompt": "hi"}),
                       ("/api/show", {"model": str(fake)}),
                       ("/api/embed", {"model": str(fake), "input": "hi"}),
                       ("/v1/chat/completions", {"model": str(fake), "messages": [
                           {"role": "user", "content": "hi"}]})):
        answer = server.client.post(path, json=body)
        assert answer.status_code == 400, (path, answer.text)
        assert "cannot be read" in answer.text and "fake.gguf" in answer.text
    assert server.client.get("/api/tags").status_code == 200
