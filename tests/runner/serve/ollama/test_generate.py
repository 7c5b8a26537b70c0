"""Ollama's native generation routes through the official ollama client and raw HTTP."""

from __future__ import annotations

import json

import jsonschema
import ollama
import pytest

GREEDY = {"temperature": 0}


def test_generate_streams_ndjson_and_ends_with_statistics_and_context(server):
    body = {"model": "smollm2:135m", "prompt": "Why is the sky blue?",
            "options": {**GREEDY, "num_predict": 12}}
    with server.client.stream("POST", "/api/generate", json=body) as response:
        assert response.headers["content-type"].startswith("application/x-ndjson")
        raw = response.read().decode()
    assert "\n\n" not in raw and raw.endswith("\n")
    lines = [json.loads(line) for line in raw.splitlines()]
    assert all(line["model"] == "smollm2:135m" and "created_at" in line for line in lines)
    done = lines[-1]
    assert done["done"] and done["done_reason"] in ("stop", "length") and done["context"]
    for key in ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
                "eval_count", "eval_duration"):
        assert isinstance(done[key], int) and done[key] >= 0, key
    assert done["total_duration"] > 0 and done["eval_count"] == 12
    text = "".join(line["response"] for line in lines)
    assert "blue" in text.lower() or "sky" in text.lower() or text


def test_generate_not_streamed_and_continued_from_its_context(ollama_client):
    first = ollama_client.generate("smollm2:135m", "The capital of France is", raw=True,
                                   options={**GREEDY, "num_predict": 3})
    assert first.response == " Paris.\n" and first.done
    second = ollama_client.generate("smollm2:135m", " The capital of Germany is",
                                    options={**GREEDY, "num_predict": 3})
    assert second.context and second.eval_count == 3


def test_chat_has_the_assistant_role_on_every_chunk(ollama_client):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    parts = list(ollama_client.chat("smollm2:135m", messages, stream=True,
                                    options={**GREEDY, "num_predict": 10}))
    assert all(p.message.role == "assistant" for p in parts) and parts[-1].done
    text = "".join(p.message.content for p in parts)
    reply = ollama_client.chat("smollm2:135m", messages, options={**GREEDY, "num_predict": 10})
    assert reply.message.content == text and "Paris" in text


def test_logprobs_have_bytes_and_at_most_n_sorted_alternatives(server, ollama_client):
    reply = server.client.post("/api/generate", json={
        "model": "smollm2:135m", "prompt": "1, 2, 3, 4,", "raw": True, "stream": False,
        "logprobs": True, "top_logprobs": 3, "options": {**GREEDY, "num_predict": 10}}).json()
    assert len(reply["logprobs"]) == 10
    for entry in reply["logprobs"]:
        assert entry["token"] and entry["logprob"] <= 0
        assert bytes(entry["bytes"]) == entry["token"].encode()
        alternatives = [t["logprob"] for t in entry["top_logprobs"]]
        assert len(alternatives) == 3 and alternatives == sorted(alternatives, reverse=True)
    streamed = ollama_client.generate("smollm2:135m", "1, 2, 3, 4,", raw=True, logprobs=True,
                                      options={**GREEDY, "num_predict": 4}, stream=True)
    assert sum(len(part.logprobs or []) for part in streamed) == 4
    plain = ollama_client.generate("smollm2:135m", "Hello", options={"num_predict": 2})
    assert not plain.logprobs


def test_a_schema_in_format_is_followed(ollama_client):
    schema = {"type": "object", "required": ["city", "country"], "additionalProperties": False,
              "properties": {"city": {"type": "string", "maxLength": 20},
                             "country": {"type": "string", "maxLength": 20}}}
    for seed in range(3):
        reply = ollama_client.chat("smollm2:135m", [{"role": "user", "content": "A city?"}],
                                   format=schema, options={"seed": seed, "temperature": 1})
        jsonschema.validate(json.loads(reply.message.content), schema)


def test_an_empty_prompt_loads_and_keep_alive_0_unloads(ollama_client):
    loaded = ollama_client.generate("gemma3:270m-base", "")
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""
    assert "gemma3:270m-base" in [m.model for m in ollama_client.ps().models]
    unloaded = ollama_client.chat("gemma3:270m-base", [], keep_alive=0)
    assert unloaded.done_reason == "unload" and unloaded.message.role == "assistant"
    assert "gemma3:270m-base" not in [m.model for m in ollama_client.ps().models]


def test_embed_is_normalised_and_the_legacy_route_is_not(ollama_client):
    result = ollama_client.embed("tiny-bert", ["first text", "a second one"])
    assert len(result.embeddings) == 2 and result.prompt_eval_count > 0
    for vector in result.embeddings:
        assert abs(sum(v * v for v in vector) - 1) < 1e-5 and len(vector) == 64
    short = ollama_client.embed("tiny-bert", "first text", dimensions=16)
    assert len(short.embeddings[0]) == 16
    legacy = ollama_client.embeddings("tiny-bert", "first text")
    assert abs(sum(v * v for v in legacy.embedding) - 1) > 1e-3       # raw, not normalised
    with pytest.raises(ollama.ResponseError) as refused:
        ollama_client.embed("tiny-bert", "word " * 2000, truncate=False)
    assert refused.value.status_code == 400 and "context length" in refused.value.error
    assert len(ollama_client.embed("tiny-bert", "word " * 2000).embeddings[0]) == 64


def test_thinking_and_tool_calls_are_taken_out_of_the_text(ollama_client):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather of a city",
        "parameters": {"type": "object", "required": ["location"],
                       "properties": {"location": {"type": "string"}}}}}]
    reply = ollama_client.chat("tiny-qwen", [{"role": "user", "content": "Weather in Boston?"}],
                               tools=tools, think=False, options={**GREEDY, "num_predict": 8})
    assert "<think>" not in reply.message.content and "<tool_call>" not in reply.message.content
    assert not reply.message.thinking
    with pytest.raises(ollama.ResponseError, match="does not support tools"):
        ollama_client.chat("gemma3:270m-base", [{"role": "user", "content": "x"}], tools=tools)
    with pytest.raises(ollama.ResponseError, match="does not support thinking"):
        ollama_client.chat("smollm2:135m", [{"role": "user", "content": "x"}], think=True)


def test_a_long_chat_drops_its_oldest_messages_to_fit(server):
    history = [{"role": "system", "content": "You are terse."}]
    for turn in range(12):
        history += [{"role": "user", "content": f"Question {turn}: " + "tell me more " * 12},
                    {"role": "assistant", "content": "More. " * 20}]
    history.append({"role": "user", "content": "Last question?"})
    reply = server.client.post("/api/chat", json={
        "model": "smollm2:135m", "messages": history, "stream": False,
        "options": {"num_ctx": 256, "num_predict": 2}}).json()
    assert reply["done"] and 100 < reply["prompt_eval_count"] <= 256
    refused = server.client.post("/api/chat", json={
        "model": "smollm2:135m", "messages": history[-1:] + [{"role": "user", "content":
                                                               "word " * 600}],
        "stream": False, "truncate": False, "options": {"num_ctx": 256, "num_predict": 2}})
    assert refused.status_code == 400 and "context" in refused.json()["error"]


def test_the_multiuser_cache_reaches_the_runners(models_dir, tmp_path):
    """RUNNER_MULTIUSER_CACHE=1: a request that shares a prefix with one still generating
    in the other slot forks its cells (cached) instead of evaluating them again."""
    import json

    from tests.support.server import ServerProcess

    system = "You are a helpful assistant who answers briefly and kindly. " * 4
    cached = {}
    for flag in ("0", "1"):
        running = ServerProcess(models_dir, tmp_path, RUNNER_NUM_PARALLEL=2,
                                RUNNER_MULTIUSER_CACHE=flag)
        try:
            def body(question, predict, stream):
                return {"model": "smollm2:135m", "prompt": system + question, "raw": True,
                        "stream": stream, "options": {"num_predict": predict,
                                                      "temperature": 0}}

            with running.client.stream("POST", "/api/generate",
                                       json=body("Count on: 1, 2, 3, 4, 5, 6, 7,", 600,
                                                 True)) as first:
                lines = first.iter_lines()
                assert not json.loads(next(lines))["done"]     # it is generating now
                second = running.client.post("/api/generate",
                                             json=body("Hi!", 2, False)).json()
                rest = [json.loads(line) for line in lines if line]
            assert rest[-1]["done"] and rest[-1]["created_at"] > second["created_at"]
            cached[flag] = second["prompt_cached_count"]
        finally:
            assert running.stop() == 0
    assert cached["0"] == 0 and cached["1"] > 40
