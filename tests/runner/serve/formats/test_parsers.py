"""Ollama's parser names: each maps to a registered reply format (or plain text), so that a
pulled model whose config names a parser reads its replies, and every name Ollama's
model/parsers/parsers.go registers is in the table."""

from __future__ import annotations

import pytest

from runner.serve.formats import FORMATS, make_extractor
from runner.serve.formats.parsers import PARSERS, format_of_parser

from tests.support.streaming import run, split_everywhere

# ParserForName's names in github.com/ollama/ollama model/parsers/parsers.go at
# fb30760996871fa9460115c753afd2c60d4ab0f7
OLLAMAS = {"qwen3", "qwen3-thinking", "qwen3.5", "ornith", "qwen3-coder", "qwen3-vl-instruct",
           "qwen3-vl-thinking", "ministral", "passthrough", "harmony", "cogito", "deepseek3",
           "olmo3", "olmo3-think", "nemotron-3-nano", "nemotron-3.5-nano", "functiongemma",
           "glm-4.7", "gemma4", "gemma4-no-thinking", "glm-ocr", "lfm2", "lfm2-thinking",
           "laguna", "poolside-v1", "cohere", "glimmer"}


def test_every_parser_name_is_in_the_table():
    assert set(PARSERS) == OLLAMAS


def test_each_names_a_registered_format():
    names = {f.name for f in FORMATS}
    assert {p.format for p in PARSERS.values() if p.format} <= names
    assert format_of_parser("qwen3.5").name == "qwen3coder"
    assert format_of_parser("olmo3").name == "olmo3" and format_of_parser("unknown") is None


# replies from Ollama's model/parsers/olmo3_test.go (fb307609), as its parser reads them
OLMO3_REPLIES = {
    '<function_calls>get_weather(location="San Francisco")</function_calls>':
        [("get_weather", {"location": "San Francisco"})],
    'Let me check the weather.<function_calls>get_weather(location="NYC")</function_calls>':
        [("get_weather", {"location": "NYC"})],
    '<function_calls>get_weather(location="San Francisco")\nget_weather(location="New York")'
    "</function_calls>": [("get_weather", {"location": "San Francisco"}),
                          ("get_weather", {"location": "New York"})],
    "<function_calls>set_price(amount=19.99)</function_calls>": [("set_price", {"amount": 19.99})],
    "<function_calls>toggle_setting(enabled=true)</function_calls>":
        [("toggle_setting", {"enabled": True})],
}


@pytest.mark.parametrize("reply", OLMO3_REPLIES)
def test_olmo3s_python_calls_read_as_ollamas_parser_reads_them(reply):
    tools = [{"type": "function", "function": {"name": n}} for n in
             ("get_weather", "set_price", "toggle_setting")]
    for pieces in split_everywhere(reply):
        _, _, calls = run(make_extractor(format_of_parser("olmo3"), tools=tools), pieces)
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == \
            OLMO3_REPLIES[reply], pieces


# replies from Ollama's model/parsers/cohere_test.go (fb307609): Cohere North wraps its answer
# in <|START_TEXT|>...<|END_TEXT|>, and the reply opens inside thinking unless think is off
COHERE_REPLIES = [
    ("Let me think about this.<|END_THINKING|><|START_TEXT|>Hello world!<|END_TEXT|>", True,
     "Hello world!", "Let me think about this.", []),
    ("<|START_TEXT|>direct answer<|END_TEXT|>", False, "direct answer", "", []),
    ("thought<|END_THINKING|>Just plain text output", True, "Just plain text output",
     "thought", []),
    ('plan<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": '
     '"get_weather", "parameters": {"city": "Paris"}},    {"tool_call_id": "1", "tool_name": '
     '"get_time", "parameters": {}}\n]<|END_ACTION|>', True, "", "plan",
     [("get_weather", {"city": "Paris"}), ("get_time", {})]),
]


@pytest.mark.parametrize("reply, thinking, content, thought, called", COHERE_REPLIES)
def test_cohere_replies_read_as_ollamas_parser_reads_them(reply, thinking, content, thought,
                                                          called):
    tools = [{"type": "function", "function": {"name": n}} for n in ("get_weather", "get_time")]
    for pieces in split_everywhere(reply):
        got = run(make_extractor(format_of_parser("cohere"), tools=tools,
                                 start_thinking=thinking), pieces)
        assert got[0].strip() == content and got[1] == thought, pieces
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in got[2]] == \
            called, pieces


# replies from Ollama's model/parsers/glimmer_test.go (fb307609) and what its parser makes of
# them: (content, thinking, calls)
ATEM = ('<atem:function_calls>\n<atem:invoke name="muse.bash">\n<atem:parameter name="command">'
        "pwd && ls -la</atem:parameter>\n</atem:invoke>\n</atem:function_calls>")
OTHER = '<atem:function_calls>\n<atem:invoke name="other.run">\n</atem:invoke>\n' \
        "</atem:function_calls>"
BASH = [("muse.bash", {"command": "pwd && ls -la"})]
GLIMMER_REPLIES = {
    " to=user<|message|>Hello": ("Hello", "", []),
    " to=muse<|message|>" + ATEM + "<|eom|>": ("", "", BASH),
    "<|message|>" + ATEM + "<|eom|>": ("", "", BASH),
    " to=user<|message|>" + ATEM + "<|eot|>": ("", "", BASH),
    " to=atem:function_calls<|message|>" + ATEM + "<|eom|>": ("", "", BASH),
    " to=self<|message|>let me look<|eom|><|start|>assistant<|message|>" + ATEM + "<|eom|>":
        ("", "let me look", BASH),
    "<|message|>" + ATEM + "<|start|>assistant to=user<|message|>Done<|eot|>":
        ("Done", "", BASH),
    " to=user<|message|>" + OTHER + "<|eot|>": (OTHER, "", []),
    " to=user<|message|>Running:\n" + ATEM + "<|eot|>": ("Running:\n" + ATEM, "", []),
    " to=user<|message|>" + ATEM + "\nDone.<|eot|>": (ATEM + "\nDone.", "", []),
}


@pytest.mark.parametrize("reply", GLIMMER_REPLIES)
def test_glimmers_replies_read_as_ollamas_parser_reads_them(reply):
    tools = [{"type": "function", "function": {"name": "muse.bash", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}}}}]
    expected = GLIMMER_REPLIES[reply]
    for pieces in split_everywhere(reply):
        content, thinking, calls = run(make_extractor(format_of_parser("glimmer"), tools=tools),
                                       pieces)
        assert (content, thinking, [(c["function"]["name"], c["function"]["arguments"])
                                    for c in calls]) == expected, pieces
