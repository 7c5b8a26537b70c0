"""A tool call the output limit cuts is reported as cut in each API's own terms, never as a
finished call: chat completions' finish_reason "length" with the arguments as written,
Anthropic's stop_reason "max_tokens" without a tool_use block, an incomplete Responses
item in an incomplete response, Ollama's chat without the call (done_reason "length");
and no call markup comes back as text."""

from __future__ import annotations

import pytest

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city.",
    "parameters": {"type": "object", "required": ["location"],
                   "properties": {"location": {"type": "string"}}}}}
QUESTION = [{"role": "user", "content": "Weather in Boston?"}]


def chat(server, limit: int) -> dict:
    return server.client.post("/v1/chat/completions", json={
        "model": "tiny-qwen", "messages": QUESTION, "tools": [WEATHER],
        "tool_choice": "required", "temperature": 0, "max_tokens": limit,
        "reasoning_effort": "none"}).json()


@pytest.fixture(scope="module")
def limit(server) -> int:
    """A max_tokens that cuts the forced call inside its location (the tiny model writes a
    long one)."""
    for limit in range(8, 120, 3):
        choice = chat(server, limit)["choices"][0]
        calls = choice["message"].get("tool_calls") or []
        if calls and '"location": "' in calls[0]["function"]["arguments"]:
            return limit
    pytest.fail("no limit cut the call after its name")


def test_chat_completions_says_length_and_gives_the_arguments_as_written(server, limit):
    choice = chat(server, limit)["choices"][0]
    (call,) = choice["message"]["tool_calls"]
    assert choice["finish_reason"] == "length"
    assert call["function"]["name"] == "get_weather"
    assert call["function"]["arguments"].startswith('{"location": "')
    assert not call["function"]["arguments"].endswith("}")
    assert "<tool_call>" not in (choice["message"]["content"] or "")


def test_anthropic_says_max_tokens_without_a_tool_use(server, limit):
    reply = server.client.post("/v1/messages", json={
        "model": "tiny-qwen", "max_tokens": limit, "messages": QUESTION, "temperature": 0,
        "tools": [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}],
        "tool_choice": {"type": "any"}, "thinking": {"type": "disabled"}}).json()
    assert reply["stop_reason"] == "max_tokens"
    assert all(block["type"] != "tool_use" for block in reply["content"])
    assert all("<tool_call>" not in block.get("text", "") for block in reply["content"])


def test_responses_gives_an_incomplete_item_in_an_incomplete_response(server, limit):
    reply = server.client.post("/v1/responses", json={
        "model": "tiny-qwen", "input": QUESTION, "max_output_tokens": limit,
        "temperature": 0, "tool_choice": "required", "reasoning": {"effort": "none"},
        "tools": [dict(WEATHER["function"], type="function")]}).json()
    assert reply["status"] == "incomplete"
    (item,) = [i for i in reply["output"] if i["type"] == "function_call"]
    assert item["status"] == "incomplete" and not item["arguments"].endswith("}")


def test_ollamas_chat_leaves_the_cut_call_out(server, limit):
    reply = server.client.post("/api/chat", json={
        "model": "tiny-qwen", "messages": QUESTION, "tools": [WEATHER], "stream": False,
        "think": False, "options": {"temperature": 0, "num_predict": limit},
        "tool_choice": "required"}).json()
    assert reply["done_reason"] == "length" and "tool_calls" not in reply["message"]
    assert "<tool_call>" not in reply["message"]["content"]
