"""The harmony renderer against gpt-oss's own chat template (llama.cpp's copy in the pinned
archive, rendered by our template path): the same text for a table of conversations."""

from __future__ import annotations

import datetime

import pytest

from runner.tokenizer import harmony
from runner.tokenizer.template import render

from tests.support.official_templates import official_template

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now.", "parameters": {
        "type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "The city."},
            "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
            "days": {"type": "integer", "default": 1},
            "tags": {"type": "array", "items": {"type": "string"}},
            "points": {"type": "array", "items": {"type": "object", "required": ["x"],
                                                  "properties": {"x": {"type": "number"},
                                                                 "y": {"type": "number"}}}},
            "opt": {"type": "string", "nullable": True},
            "flag": {"type": "boolean", "default": False},
            "mixed": {"type": ["string", "number"]},
            "choice": {"oneOf": [{"type": "string", "description": "a name"},
                                 {"type": "number", "default": 3}]},
            "shape": {"oneOf": [{"type": "object"}, {"type": "string"}]},
            "where": {"type": "object", "required": ["lat", "lon"],
                      "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}},
            "anything": {}}}}}
CLOCK = {"type": "function", "function": {"name": "now", "description": "The time.",
                                          "parameters": {"type": "object", "properties": {}}}}
TOOLS = [WEATHER, CLOCK]


def call(name, **arguments):
    return {"function": {"name": name, "arguments": arguments}}


USER = {"role": "user", "content": "What is the weather in Paris?"}
CONVERSATIONS = {
    "one turn": ([USER], None),
    "system": ([{"role": "system", "content": "Answer briefly."}, USER], None),
    "developer": ([{"role": "developer", "content": "Answer in French."}, USER], None),
    "tools": ([USER], TOOLS),
    "instructions and tools": ([{"role": "system", "content": "Be kind."}, USER], TOOLS),
    "turns drop earlier reasoning": ([
        USER, {"role": "assistant", "content": "Sunny.", "thinking": "It is summer."},
        {"role": "user", "content": "And tomorrow?"}], None),
    "a call keeps its reasoning": ([
        USER, {"role": "assistant", "content": "", "thinking": "I need the tool.",
               "tool_calls": [call("get_weather", city="Paris")]},
        {"role": "tool", "content": '{"temp": 20}'}], TOOLS),
    "reasoning in content": ([
        USER, {"role": "assistant", "content": "Let me look.",
               "tool_calls": [call("now")]},
        {"role": "tool", "content": "12:00"}], TOOLS),
    "an answer drops the call's reasoning": ([
        USER, {"role": "assistant", "content": "", "thinking": "Tool first.",
               "tool_calls": [call("get_weather", city="Paris", unit="c")]},
        {"role": "tool", "content": "20 degrees"},
        {"role": "assistant", "content": "It is 20 degrees in Paris."},
        {"role": "user", "content": "Thanks! And Rome?"}], TOOLS),
    "several calls": ([
        USER, {"role": "assistant", "content": "", "tool_calls": [call("now")]},
        {"role": "tool", "content": "12:00"},
        {"role": "assistant", "content": "", "thinking": "Now the weather.",
         "tool_calls": [call("get_weather", city="Paris", days=2, tags=["été", "ciel"])]},
        {"role": "tool", "content": "sunny"}], TOOLS),
}


@pytest.fixture(scope="module")
def template():
    return official_template("openai-gpt-oss-120b.jinja")


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
@pytest.mark.parametrize("name", CONVERSATIONS)
def test_the_renderer_writes_what_gpt_oss_template_writes(template, name, effort):
    messages, tools = CONVERSATIONS[name]
    today = datetime.date.today()
    theirs = render(template, messages, tools=tools, reasoning_effort=effort)
    ours = harmony.render(messages, tools, effort, today=today)
    if today != datetime.date.today():        # midnight passed between the two
        ours = harmony.render(messages, tools, effort)
    assert ours == theirs


def test_a_finished_conversation_ends_with_return_and_keeps_its_reasoning(template):
    messages = [USER, {"role": "assistant", "content": "Sunny.", "thinking": "Summer."}]
    theirs = render(template, messages, add_generation_prompt=False)
    ours = harmony.render(messages, add_generation_prompt=False)
    assert ours == theirs
    assert ours.endswith("<|channel|>analysis<|message|>Summer.<|end|><|start|>assistant"
                         "<|channel|>final<|message|>Sunny.<|return|>")


def test_every_call_of_a_message_is_written():
    """The template writes the first call only; both go, as Ollama writes them."""
    messages = [USER, {"role": "assistant", "content": "",
                       "tool_calls": [call("now"), call("get_weather", city="Rome")]},
                {"role": "tool", "content": "12:00"}, {"role": "tool", "content": "rain"}]
    text = harmony.render(messages, TOOLS)
    assert 'to=functions.now<|channel|>commentary json<|message|>{}<|call|>' in text
    assert 'to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Rome"}' \
        '<|call|>' in text


def test_bad_conversations_are_clear_errors():
    with pytest.raises(ValueError, match="no earlier assistant message that called a tool|"
                                         "needs an earlier assistant message"):
        harmony.render([USER, {"role": "tool", "content": "12:00"}])
    with pytest.raises(ValueError, match="low, medium or high, not 'max'"):
        harmony.render([USER], reasoning_effort="max")
    with pytest.raises(ValueError, match="not both"):
        harmony.render([USER, {"role": "assistant", "content": "a", "thinking": "b",
                               "tool_calls": [call("now")]}])
