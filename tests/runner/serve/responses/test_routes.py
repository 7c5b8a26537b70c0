"""OpenAI's Responses API through the official openai client: text in and out, whole and
streamed (the client's own stream helper checks the event sequence), instructions, items
with a function call and its output, forced calls (a tiny model cannot choose well),
reasoning, a JSON schema, and refusals."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather of a city",
           "parameters": {"type": "object", "required": ["location"],
                          "additionalProperties": False,
                          "properties": {"location": {"type": "string",
                                                      "enum": ["Boston", "Paris"]}}}}
QUESTION = "What is the capital of France?"


def test_text_in_text_out_and_its_stream(openai_client):
    reply = openai_client.responses.create(model="smollm2:135m", input=QUESTION,
                                           max_output_tokens=10, temperature=0)
    assert reply.object == "response" and reply.id.startswith("resp_")
    assert "Paris" in reply.output_text
    assert reply.status in ("completed", "incomplete")
    assert 0 < reply.usage.output_tokens <= 10 and reply.usage.input_tokens > 0
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens
    with openai_client.responses.stream(model="smollm2:135m", input=QUESTION,
                                        max_output_tokens=10, temperature=0) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert kinds.count("response.output_item.added") == 1 == \
        kinds.count("response.output_item.done")
    assert final.output_text == reply.output_text
    numbers = []
    for event in openai_client.responses.create(model="smollm2:135m", input=QUESTION,
                                                max_output_tokens=4, stream=True):
        numbers.append(event.sequence_number)
    assert numbers == list(range(len(numbers)))


def test_max_output_tokens_makes_an_incomplete_response(openai_client):
    reply = openai_client.responses.create(model="smollm2:135m", input=QUESTION,
                                           max_output_tokens=2, temperature=0)
    assert reply.status == "incomplete"
    assert reply.incomplete_details.reason == "max_output_tokens"


def test_a_forced_call_its_output_and_the_next_call(openai_client):
    reply = openai_client.responses.create(
        model="tiny-qwen", instructions="Use the tools.", tools=[WEATHER],
        input=[{"role": "user", "content": [{"type": "input_text",
                                             "text": "Weather in Boston?"}]}],
        tool_choice="required", reasoning={"effort": "none"}, temperature=0)
    (call,) = [item for item in reply.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    history = [{"role": "user", "content": "Weather in Boston?"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name,
                "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id,
                "output": "Sunny, 20C"}]
    with openai_client.responses.stream(
            model="tiny-qwen", input=history, tools=[WEATHER],
            tool_choice={"type": "function", "name": "get_weather"},
            reasoning={"effort": "none"}, temperature=0) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.done" in kinds
    (again,) = [item for item in final.output if item.type == "function_call"]
    jsonschema.validate(json.loads(again.arguments), WEATHER["parameters"])
    assert "<tool_call>" not in final.output_text


def test_what_codex_sends_is_accepted(openai_client):
    """Codex's tools: a namespace's functions under "<namespace>.<name>" (as Ollama names
    them), web search and a custom tool as functions, hosted tools left out; its history's
    custom tool calls and hosted searches."""
    namespace = {"type": "namespace", "name": "muse", "description": "Muse tools.",
                 "tools": [dict(WEATHER, name="get_weather"),
                           {"type": "function", "name": "muse.bash",
                            "parameters": {"type": "object", "properties": {}}}]}
    tools = [namespace, {"type": "web_search"}, {"type": "local_shell"},
             {"type": "custom", "name": "apply_patch", "description": "Patch files.",
              "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}]
    history = [{"role": "developer", "content": "Be brief."},
               {"role": "user", "content": "Weather in Boston?"},
               {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch",
                "input": "*** Begin Patch"},
               {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"},
               {"type": "web_search_call", "id": "ws_1", "status": "completed",
                "action": {"type": "search", "query": "weather"}}]
    reply = openai_client.responses.create(
        model="tiny-qwen", tools=tools, input=history, reasoning={"effort": "none"},
        tool_choice={"type": "function", "name": "muse.get_weather"}, temperature=0)
    (call,) = [item for item in reply.output if item.type == "function_call"]
    assert call.name == "muse.get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])


def test_a_custom_tools_call_is_a_custom_tool_call_with_its_input(openai_client):
    """Codex's apply_patch is a custom tool (free-form input): its call comes back as a
    custom_tool_call item whose input is the text, whole and streamed."""
    patch = {"type": "custom", "name": "apply_patch", "description": "Patch files."}
    asked = dict(model="tiny-qwen", tools=[patch], input="Patch the file.",
                 tool_choice={"type": "custom", "name": "apply_patch"},
                 reasoning={"effort": "none"}, temperature=0, max_output_tokens=40)
    reply = openai_client.responses.create(**asked)
    (call,) = [item for item in reply.output if item.type.endswith("call")]
    assert call.type == "custom_tool_call" and call.name == "apply_patch"
    assert isinstance(call.input, str) and call.call_id
    events = list(openai_client.responses.create(**asked, stream=True))   # the client parses
    kinds = [event.type for event in events]
    assert "response.custom_tool_call_input.done" in kinds
    assert "response.function_call_arguments.done" not in kinds
    (again,) = [event.item for event in events if event.type == "response.output_item.done"
                and event.item.type.endswith("call")]
    assert again.type == "custom_tool_call" and again.input == call.input


def test_a_json_schema_shapes_the_text(openai_client):
    schema = {"type": "object", "required": ["city"], "additionalProperties": False,
              "properties": {"city": {"type": "string", "maxLength": 12}}}
    reply = openai_client.responses.create(
        model="smollm2:135m", input=QUESTION, temperature=0, max_output_tokens=40,
        text={"format": {"type": "json_schema", "name": "answer", "schema": schema}})
    jsonschema.validate(json.loads(reply.output_text), schema)


def test_reasoning_items_go_back_as_thinking(openai_client):
    history = [{"role": "user", "content": QUESTION},
               {"type": "reasoning", "id": "rs_1", "summary": [
                   {"type": "summary_text", "text": "Easy."}]},
               {"role": "assistant", "content": [{"type": "output_text", "text": "Paris."}]},
               {"role": "user", "content": "And of Spain?"}]
    reply = openai_client.responses.create(model="tiny-qwen", input=history,
                                           reasoning={"effort": "low"}, max_output_tokens=8)
    assert reply.status in ("completed", "incomplete")
    assert [item.type for item in reply.output] in (["reasoning", "message"], ["reasoning"],
                                                    ["message"], [])


@pytest.mark.parametrize("call,status", [
    (dict(model="no-such-model", input="hi"), 404),
    (dict(model="tiny-qwen", input="hi", previous_response_id="resp_1"), 400),
    (dict(model="tiny-qwen", input=[]), 400),
    (dict(model="tiny-qwen", input="hi", tools=[{"type": "teleport"}]), 400),
    (dict(model="tiny-qwen", input="hi", tools=[{"type": "namespace", "name": "x"}]), 400),
    (dict(model="tiny-qwen", input=[{"type": "function_call", "call_id": "c", "name": "f",
                                     "arguments": "{oops"}]), 400),
    (dict(model="tiny-qwen", input=[{"role": "user", "content": [
        {"type": "input_image", "image_url": "https://example.com/a.png"}]}]), 400),
])
def test_refusals_take_openais_shape(openai_client, call, status):
    with pytest.raises(openai.APIStatusError) as raised:
        openai_client.responses.create(**call)
    assert raised.value.status_code == status
    assert raised.value.body["message"]
