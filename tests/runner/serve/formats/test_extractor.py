"""Thinking and tool calls taken out of streamed text, per model family."""

from __future__ import annotations

import pytest

from runner.serve.formats import FORMATS, PLAIN, Extractor, forced_call_grammar, format_for
from tests.support.streaming import run, split_everywhere

QWEN, LLAMA3 = format_for("<tool_call> <think>"), format_for("<|start_header_id|> parameters")
GEMMA4 = format_for("<|tool_call> <|channel>")


QWEN_REPLY = ('<think>The user wants weather.</think>\n\nLet me check.\n<tool_call>\n'
              '{"name": "get_weather", "arguments": {"location": "Boston"}}\n</tool_call>')


@pytest.mark.parametrize("pieces", list(split_everywhere(QWEN_REPLY)))
def test_qwen_thinking_and_calls_survive_any_split(pieces):
    content, thinking, calls = run(Extractor(QWEN, tools=True), pieces)
    assert thinking == "The user wants weather." and content == "Let me check.\n"
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    assert calls[0]["function"]["arguments"] == {"location": "Boston"}
    assert calls[0]["id"].startswith("call_") and calls[0]["function"]["index"] == 0


def test_thinking_off_drops_it_and_a_prompt_that_opened_it_starts_inside():
    assert run(Extractor(QWEN, thinking=False), ["<think>hidden</think>shown"]) == \
        ("shown", "", [])
    assert run(Extractor(QWEN, start_thinking=True), ["plan</think>answer"]) == \
        ("answer", "plan", [])


def test_a_call_that_does_not_parse_is_content_and_tags_are_text_without_tools():
    content, _, calls = run(Extractor(QWEN, tools=True), ["<tool_call>not json</tool_call>x"])
    assert calls == [] and content == "<tool_call>not json</tool_call>x"
    assert run(Extractor(QWEN, tools=False), ["a <tool_call>{}</tool_call>"])[0] == \
        "a <tool_call>{}</tool_call>"


@pytest.mark.parametrize("pieces", list(split_everywhere(
    '{"name": "get_weather", "parameters": {"location": "Paris, \\"FR\\""}}')))
def test_llama3_takes_a_reply_that_is_a_json_call(pieces):
    content, _, calls = run(Extractor(LLAMA3, tools=True), pieces)
    assert content == "" and calls[0]["function"]["arguments"] == {"location": 'Paris, "FR"'}
    assert run(Extractor(LLAMA3, tools=True), ['{"a": 1} is JSON'])[0] == '{"a": 1} is JSON'
    assert run(Extractor(LLAMA3, tools=True), ["Hello"])[0] == "Hello"


@pytest.mark.parametrize("pieces", list(split_everywhere(
    '<|channel>thought\nweather?<channel|>Sure.<|tool_call>call:get_weather{location:'
    '<|"|>New York, "NY"<|"|>,days:3}<tool_call|>')))
def test_gemma4_channel_and_call_syntax(pieces):
    content, thinking, calls = run(Extractor(GEMMA4, tools=True), pieces)
    assert thinking == "weather?" and content == "Sure."
    assert calls[0]["function"]["arguments"] == {"location": 'New York, "NY"', "days": 3}


def test_formats_are_recognised_from_templates():
    assert format_for(None) is PLAIN and format_for("{{ messages }}") is PLAIN
    rank = {f.name: at for at, f in enumerate(FORMATS)}
    for particular, general in [("qwen3coder", "qwen"), ("seed-oss", "qwen3coder"),
                                ("functionary", "qwen3coder"), ("functionary", "llama3"),
                                ("glm", "qwen"), ("minimax-m2", "qwen"), ("gigachat", "gigachat3"),
                                ("deepseek-v3.2", "deepseek-v4"), ("deepseek-v4", "qwen"),
                                ("harmony", "qwen")]:
        assert rank[particular] < rank[general]
    harmony = format_for("<|start|>assistant<|channel|>final<|message|>{{ content }}<|end|>")
    assert harmony.name == "harmony" and harmony.extractor == "harmony"
    assert run(Extractor(PLAIN, tools=True), ["<think>x</think>"])[0] == "<think>x</think>"


def test_a_forced_call_grammar_names_each_tool_and_its_schema():
    tools = [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
             {"function": {"name": "b"}}]
    grammar = forced_call_grammar(QWEN, tools, {"<tool_call>": 7}.get)
    assert grammar.startswith("%llguidance {}\nstart: (")
    assert "<[7]>" in grammar and '"</tool_call>"' in grammar      # not a single token
    assert grammar.count("%json") == 2 and '\\"b\\"' in grammar
    gemma = forced_call_grammar(GEMMA4, tools, {"<|tool_call>": 9}.get)  # its own syntax
    assert gemma is not None and '<[9]> "call:a"' in gemma and '<[9]> "call:b"' in gemma
    assert forced_call_grammar(QWEN, [], lambda tag: None) is None


CUT_CALLS = {       # a call cut off (max_tokens ran out) -> its arguments as written
    '{"name": "get_weather", "arguments": {"location": "Bos': '{"location": "Bos',
    '{"name": "get_weather", "arguments": {"location": "Boston", "unit"':
        '{"location": "Boston", "unit"',
    '{"name": "get_weather", "arguments": {"days": [1, 2': '{"days": [1, 2',
    '{"name": "get_weather", "arguments": {"q": "say \\"hi\\': '{"q": "say \\"hi\\',
    '{"name": "get_weather", "argu': "",
}


@pytest.mark.parametrize("cut", CUT_CALLS)
def test_a_call_cut_off_says_so_with_its_arguments_as_written(cut):
    for pieces in (["<tool_call>\n" + cut], list("<tool_call>\n" + cut)):
        content, _, calls = run(Extractor(QWEN, tools=True), pieces)
        assert content == "" and len(calls) == 1 and calls[0]["cut"]
        assert calls[0]["function"]["name"] == "get_weather"
        assert calls[0]["function"]["arguments"] == CUT_CALLS[cut]
    # cut before the name: nothing to call, and no markup as text
    assert run(Extractor(QWEN, tools=True), ['<tool_call>{"na']) == ("", "", [])


def test_a_finished_call_is_not_cut():
    _, _, calls = run(Extractor(QWEN, tools=True),
                      ['<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'])
    assert "cut" not in calls[0] and calls[0]["function"]["arguments"] == {}


def test_a_call_cut_inside_its_name_is_no_call():
    content, _, calls = run(Extractor(QWEN, tools=True),
                            ['<tool_call>{"name": "get_wea'])
    assert calls == [] and content == ""


