"""Anthropic's Messages API through the official anthropic client: whole and streamed,
tools forced with tool_choice (a tiny model cannot choose well), a conversation with
tool_use and tool_result blocks, thinking, count_tokens, and errors in Anthropic's shape."""

from __future__ import annotations

import anthropic
import jsonschema
import pytest

WEATHER = {"name": "get_weather", "description": "The weather of a city",
           "input_schema": {"type": "object", "required": ["location"],
                            "additionalProperties": False,
                            "properties": {"location": {"type": "string",
                                                        "enum": ["Boston", "Paris"]}}}}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0}           # the 2.x client sends no sampling fields of its own


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)


def test_a_message_and_its_stream(client):
    reply = client.messages.create(model="smollm2:135m", max_tokens=10, messages=QUESTION,
                                   extra_body=GREEDY)
    assert reply.type == "message" and reply.role == "assistant"
    assert reply.id.startswith("msg_") and reply.model == "smollm2:135m"
    (block,) = reply.content
    assert block.type == "text" and "Paris" in block.text
    assert reply.stop_reason in ("end_turn", "max_tokens") and reply.stop_sequence is None
    assert 0 < reply.usage.output_tokens <= 10 and reply.usage.input_tokens > 0
    kinds, texts = [], []
    with client.messages.stream(model="smollm2:135m", max_tokens=10, messages=QUESTION,
                                extra_body=GREEDY) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "content_block_delta":
                texts.append(event.delta.text)
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert [k for k in kinds if k.startswith("content_block_") and k != "content_block_delta"
            ] == ["content_block_start", "content_block_stop"]
    assert "".join(texts) == final.content[0].text == block.text
    assert final.stop_reason == reply.stop_reason
    assert final.usage.output_tokens == reply.usage.output_tokens


def test_max_tokens_and_stop_sequences(client):
    short = client.messages.create(model="smollm2:135m", max_tokens=2, messages=QUESTION,
                                   extra_body=GREEDY)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 2
    stopped = client.messages.create(model="smollm2:135m", max_tokens=30, messages=QUESTION,
                                     extra_body=GREEDY, stop_sequences=["Paris"])
    assert "Paris" not in stopped.content[0].text and stopped.stop_reason == "end_turn"


def test_a_forced_tool_call_and_its_result(client):
    system = [{"type": "text", "text": "Use the tools."}]
    question = [{"role": "user", "content": [{"type": "text", "text": "Weather in Boston?"}]}]
    reply = client.messages.create(
        model="tiny-qwen", max_tokens=400, system=system, messages=question, tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather"},
        thinking={"type": "disabled"}, extra_body=GREEDY)
    assert reply.stop_reason == "tool_use"
    (call,) = [b for b in reply.content if b.type == "tool_use"]
    assert call.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(call.input, WEATHER["input_schema"])
    history = question + [
        {"role": "assistant", "content": [b.model_dump() for b in reply.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                      "content": "Sunny, 20C"}]}]
    with client.messages.stream(model="tiny-qwen", max_tokens=400, system=system,
                                messages=history, tools=[WEATHER],
                                tool_choice={"type": "any"}, thinking={"type": "disabled"},
                                extra_body=GREEDY) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert "input_json" in kinds or "content_block_delta" in kinds
    (streamed,) = [b for b in final.content if b.type == "tool_use"]
    assert streamed.name == "get_weather" and final.stop_reason == "tool_use"
    jsonschema.validate(streamed.input, WEATHER["input_schema"])
    assert all("<tool_call>" not in b.text for b in final.content if b.type == "text")


def test_thinking_comes_as_thinking_blocks(client):
    reply = client.messages.create(model="tiny-qwen", max_tokens=40, messages=QUESTION,
                                   thinking={"type": "enabled", "budget_tokens": 1024},
                                   extra_body=GREEDY)
    assert [b.type for b in reply.content] in (["thinking", "text"], ["thinking"], ["text"],
                                               [])
    for block in reply.content:
        assert (block.thinking if block.type == "thinking" else block.text)


def test_count_tokens_counts_the_whole_prompt(client, server):
    counted = client.messages.count_tokens(model="tiny-qwen", messages=QUESTION)
    assert server.client.post("/api/generate", json={"model": "tiny-qwen",
                                                     "keep_alive": 0}).status_code == 200
    reply = client.messages.create(model="tiny-qwen", max_tokens=1, messages=QUESTION,
                                   extra_body=GREEDY)
    assert counted.input_tokens == reply.usage.input_tokens > 20
    with_tools = client.messages.count_tokens(model="tiny-qwen", messages=QUESTION,
                                              tools=[WEATHER])
    assert with_tools.input_tokens > counted.input_tokens + 100     # beyond the context too


@pytest.mark.parametrize("call,error,kind", [
    (dict(model="no-such-model", max_tokens=5, messages=QUESTION), anthropic.NotFoundError,
     "not_found_error"),
    (dict(model="tiny-qwen", max_tokens=0, messages=QUESTION), anthropic.BadRequestError,
     "invalid_request_error"),
    (dict(model="tiny-qwen", max_tokens=5, messages=[]), anthropic.BadRequestError,
     "invalid_request_error"),
    (dict(model="tiny-qwen", max_tokens=5, messages=QUESTION, tools=[WEATHER],
          tool_choice={"type": "tool", "name": "nope"}), anthropic.BadRequestError,
     "invalid_request_error"),
    (dict(model="tiny-qwen", max_tokens=5, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "http://example.com/a.png"}}]}]),
     anthropic.BadRequestError, "invalid_request_error"),
    (dict(model="tiny-qwen", max_tokens=5, messages=[{"role": "assistant", "content": [
        {"type": "tool_result", "tool_use_id": "x", "content": "y"}]}]),
     anthropic.BadRequestError, "invalid_request_error"),
])
def test_errors_take_anthropics_shape(client, call, error, kind):
    with pytest.raises(error) as raised:
        client.messages.create(**call)
    assert raised.value.body["type"] == "error"
    assert raised.value.body["error"]["type"] == kind
    assert raised.value.body["error"]["message"]


def test_what_claude_code_sends_is_accepted(server):
    """A body shaped as Claude Code's (system messages among the turns, cache_control,
    metadata, ?beta=true, a server tool, a document, redacted thinking, a server tool's
    blocks in the history): answered, the system messages' text in the prompt's system
    turn."""
    body = {
        "model": "tiny-qwen", "max_tokens": 3, "temperature": 0, "stream": False,
        "metadata": {"user_id": "someone"}, "context_management": {"edits": []},
        "system": [{"type": "text", "text": "You are Claude Code.",
                    "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "Bash", "description": "Run a command.",
                   "input_schema": {"type": "object", "properties": {
                       "command": {"type": "string"}}},
                   "cache_control": {"type": "ephemeral"}},
                  {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Hello", "cache_control": {"type": "ephemeral"}},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                                "data": "A NOTE"}, "title": "note"}]},
            {"role": "system", "content": "Agents you may call: none."},
            {"role": "assistant", "content": [
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "thinking", "thinking": "Hmm.", "signature": "sig"},
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                 "input": {"query": "x"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                 "content": []},
                {"type": "text", "text": "Hi."}]},
            {"role": "user", "content": "Go on."}]}
    reply = server.client.post("/v1/messages?beta=true", json=body)
    assert reply.status_code == 200, reply.text
    assert reply.json()["type"] == "message"
    counted = server.client.post("/v1/messages/count_tokens?beta=true",
                                 json={k: v for k, v in body.items() if k != "max_tokens"})
    assert counted.status_code == 200, counted.text
    without = dict(body, messages=[m for m in body["messages"] if m["role"] != "system"])
    fewer = server.client.post("/v1/messages/count_tokens", json={
        k: v for k, v in without.items() if k != "max_tokens"}).json()["input_tokens"]
    assert counted.json()["input_tokens"] > fewer               # the system message counts
