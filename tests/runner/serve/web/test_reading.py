"""The request bodies, read as the routes read them (reading.parse): what each accepts, what it
refuses at the door and in what words, and the OpenAPI schema they publish."""

from __future__ import annotations

import json
import math
import re

import pytest

from runner.serve.app import create_app
from runner.serve.ollama.bodies import ChatRequest, CreateRequest, EmbedRequest, GenerateRequest, \
    ModelRequest
from runner.serve.openai.bodies import ChatCompletionRequest, OpenAIEmbeddingsRequest
from runner.serve.service.options import Settings
from runner.serve.web.reading import parse
from runner.serve.service.core import ServeError


def refused(kind, raw) -> str:
    raw = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    with pytest.raises(ServeError) as caught:
        parse(kind, raw)
    assert caught.value.status == 400
    return str(caught.value)


def test_a_generate_body_reads_its_fields_and_ollamas_defaults():
    body = parse(GenerateRequest, b'{"model": "m", "prompt": "hi", "keep_alive": "1h30m", '
                                  b'"options": {"num_ctx": 2048.0, "unknown": [1]}}')
    assert (body.model, body.prompt, body.stream, body.truncate, body.keep_alive) == \
        ("m", "hi", True, True, 5400.0)
    assert body.given_options() == {"num_ctx": 2048, "unknown": [1]}
    assert parse(GenerateRequest, b'{"model": "m", "keep_alive": -1}').keep_alive == math.inf
    assert parse(GenerateRequest, b'{"model": "m", "keep_alive": 1e12}').keep_alive == math.inf


def test_older_clients_name_the_model_with_name():
    assert parse(ModelRequest, b'{"name": "m:7b"}').model == "m:7b"
    assert parse(CreateRequest, b'{"name": "x", "from": "m"}').source == "m"


@pytest.mark.parametrize("kind, raw, words", [
    (GenerateRequest, b"", "missing request body"),
    (GenerateRequest, b"{oops", "invalid JSON"),
    (GenerateRequest, b"[1]", "JSON object"),
    (GenerateRequest, {"prompt": "x"}, "model is required"),
    (GenerateRequest, {"model": 5}, '"model" has the wrong type'),
    (GenerateRequest, b'{"model": "m", "options": {"temperature": NaN}}', "invalid JSON"),
    (GenerateRequest, b'{"model": "m", "prompt": "\\ud800"}', "invalid JSON"),
    (GenerateRequest, b'{"model": "m", "context": ' + b"[" * 5000 + b"]" * 5000 + b"}",
     "invalid JSON"),
    (GenerateRequest, {"model": "m", "options": {"repeat_penalty": 0}}, "repeat_penalty"),
    (GenerateRequest, {"model": "m", "options": {"top_p": 2}}, "top_p"),
    (GenerateRequest, {"model": "m", "options": {"use_mmap": "x"}}, "options.use_mmap"),
    (GenerateRequest, {"model": "m", "options": {"num_ctx": 1.5}}, "options.num_ctx"),
    (GenerateRequest, {"model": "m", "options": [1]}, '"options" has the wrong type'),
    (GenerateRequest, {"model": "m", "keep_alive": "soon"}, "invalid duration"),
    (GenerateRequest, {"model": "m", "think": "loud"}, "think must be"),
    (GenerateRequest, {"model": "m", "top_logprobs": 21}, "top_logprobs"),
    (GenerateRequest, {"model": "m", "raw": True, "system": "s"}, "raw mode"),
    (GenerateRequest, {"model": "m", "context": [-1]}, "context.0"),
    (ChatRequest, {"model": "m", "messages": [{"role": {"a": 1}}]}, "messages.0.role"),
    (ChatRequest, {"model": "m", "messages": [{"role": "wizard"}]}, "role must be one of"),
    (ChatRequest, {"model": "m", "tools": [{"function": {}}]}, "tools.0.function.name"),
    (ChatRequest, {"model": "m", "tools": [{"type": "web", "function": {"name": "f"}}]},
     "tools.0.type"),
    (ChatRequest, {"model": "m", "tool_choice": "required"}, "needs tools"),
    (ChatRequest, {"model": "m", "tools": [{"function": {"name": "f"}}],
                   "tool_choice": {"function": {"name": "g"}}}, "not among the tools"),
    (EmbedRequest, {"model": "m", "input": [1, 2]}, "invalid input type"),
    (EmbedRequest, {"model": "m", "dimensions": 0}, "dimensions"),
    (CreateRequest, {"model": "x"}, "neither 'from' nor 'files'"),
    (CreateRequest, {"model": "x", "from": "m", "parameters": ["temperature", 1]},
     '"parameters" has the wrong type'),
    (ModelRequest, {"model": "x" * 2000}, "model"),
    (ChatCompletionRequest, {"model": "m", "messages": []}, "messages"),
    (ChatCompletionRequest, {"model": "m", "messages": [{"role": "user", "content": "x"}],
                             "stream_options": True}, '"stream_options" has the wrong type'),
    (ChatCompletionRequest, {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "video"}]}]}, "messages.0.content"),
    (ChatCompletionRequest, {"model": "m", "messages": [{"role": "user", "content": "x"}],
                             "reasoning_effort": "extreme"}, "reasoning_effort"),
    (OpenAIEmbeddingsRequest, {"model": "m", "input": [[1, 2], []]}, "cannot be empty"),
])
def test_a_malformed_body_is_refused_with_a_sentence_naming_the_field(kind, raw, words):
    message = refused(kind, raw)
    assert words.lower() in message.lower(), message
    if not isinstance(raw, bytes):                # (Ollama's own words for a bad body)
        assert message.endswith(".") and not message.endswith("..")


def test_the_published_schema_describes_every_json_body_and_resolves():
    schema = create_app(Settings()).openapi()
    text = json.dumps(schema)
    components = schema["components"]["schemas"]
    assert set(re.findall(r"#/components/schemas/([A-Za-z0-9_]+)", text)) <= set(components)
    for path in ("/api/generate", "/api/chat", "/api/embed", "/api/create", "/api/show",
                 "/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
        operation = next(iter(schema["paths"][path].values()))
        assert "$ref" in operation["requestBody"]["content"]["application/json"]["schema"]
    assert "repeat_penalty" in components["Options"]["properties"]
