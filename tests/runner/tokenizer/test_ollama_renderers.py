"""Ollama's renderers, byte for byte: each JSON file in ollama_renderers/ holds the cases of
one of Ollama's Go renderer tests (model/renderers/*_test.go; the file's "source" names the
test file and the commit they were copied from): the messages, tools and think value of each
case and the prompt Ollama's test expects ("expected"), or, where the Go test checks pieces,
the pieces it holds ("expected_parts") and how it ends ("expected_suffix"); "options" are
keyword arguments standing for what a Go test sets on its renderer. Copied as data,
not code: the test tables' Go literals written as the JSON a request carries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.tokenizer.renderers import NOT_RENDERED, RENDERERS, render_named
from runner.tokenizer.renderers.go import marshal, value_text

CASES = Path(__file__).parent / "ollama_renderers"


def _cases():
    for path in sorted(CASES.glob("*.json")):
        for case in json.loads(path.read_text(encoding="utf-8"))["cases"]:
            yield pytest.param(case, id=f"{path.stem}: {case['name']}")


@pytest.mark.parametrize("case", _cases())
def test_the_prompt_is_the_one_ollamas_test_expects(case):
    if "options" in case:          # what a Go test sets on its renderer (glimmer's date)
        got = RENDERERS[case["renderer"]](case["messages"], case["tools"], case["think"],
                                          **case["options"])
    else:
        got = render_named(case["renderer"], case["messages"], case["tools"], case["think"])
    if "expected" in case:
        assert got == case["expected"]
    for part in case.get("expected_parts", []):       # a Go test that checks pieces
        assert part in got
    assert got.endswith(case.get("expected_suffix", ""))


def test_every_renderer_here_has_ollamas_cases():
    named = {case.values[0]["renderer"] for case in _cases()}
    # qwen35_test.go checks pieces; ornith's and gemma4's sizes are tested apart (below);
    # olmo3.1 differs from olmo3 by its system text only
    assert named >= set(RENDERERS) - {"qwen3.5", "ornith", "olmo3.1", "gemma4", "gemma4-large"}


# rendererForName's names in github.com/ollama/ollama model/renderers/renderer.go at
# fb30760996871fa9460115c753afd2c60d4ab0f7
OLLAMAS = {"qwen3-coder", "qwen3-vl-instruct", "qwen3-vl-thinking", "qwen3.5", "qwen3.8",
           "ornith", "cogito", "deepseek3.1", "olmo3", "olmo3.1", "olmo3-think",
           "olmo3-32b-think", "nemotron-3-nano", "nemotron-3.5-nano", "gemma4", "gemma4-small",
           "gemma4-large", "functiongemma", "glm-4.7", "glm-ocr", "lfm2", "lfm2-thinking",
           "laguna", "poolside-v1", "cohere", "glimmer"}


def test_every_name_ollama_renders_is_rendered_or_listed_as_not():
    assert set(RENDERERS) | set(NOT_RENDERED) == OLLAMAS
    assert not set(RENDERERS) & set(NOT_RENDERED)


def test_an_unknown_renderer_is_said_plainly():
    with pytest.raises(ValueError, match='"gemma5"'):
        render_named("gemma5", [{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("value, text", [
    (1, "1"), (2.5, "2.5"), (1e21, "1e+21"), (1e-7, "1e-07"), ("<&>", '"\\u003c\\u0026\\u003e"'),
    ({"b": 1, "a": [True, None]}, '{"a":[true,null],"b":1}')])
def test_values_marshal_as_go_writes_them(value, text):
    assert marshal(value) == text


@pytest.mark.parametrize("value, text", [(3.0, "3"), (1e6, "1e+06"), (0.5, "0.5"),
                                         (123456.0, "123456"), (1e-5, "1e-05")])
def test_values_print_as_gos_v_verb(value, text):
    assert value_text(value) == text


# -- Qwen 3.5: qwen35_test.go (at the commit the JSON files name) checks pieces of prompts --

def _call(name: str, **arguments) -> dict:
    return {"function": {"name": name, "arguments": arguments}}


def _tool(name: str, description: str, **types: str) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description, "parameters": {
            "type": "object", "properties": {k: {"type": t} for k, t in types.items()},
            "required": list(types)}}}


MATH_TOOLS = [_tool("add", "Add two numbers", a="integer", b="integer"),
              _tool("multiply", "Multiply two numbers", x="integer", y="integer")]
WEATHER_TOOLS = [_tool("get_weather", "Get weather for a location", location="string"),
                 _tool("get_uv", "Get UV index for a location", location="string")]


def test_qwen35_no_think_prefill():
    got = render_named("qwen3.5", [{"role": "user", "content": "hello"}], None, False)
    assert got.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_qwen35_back_to_back_tool_calls_and_responses():
    got = render_named("qwen3.5", [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Run add and multiply."},
        {"role": "assistant", "content": "I'll run both now.",
         "thinking": "Need to call add and multiply.",
         "tool_calls": [_call("add", a=2, b=3), _call("multiply", x=4, y=5)]},
        {"role": "tool", "content": "5"}, {"role": "tool", "content": "20"},
        {"role": "user", "content": "Summarize the results."}], MATH_TOOLS)
    assert "Need to call add and multiply." not in got
    assert ("<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n"
            "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=multiply>\n"
            "<parameter=x>\n4\n</parameter>\n<parameter=y>\n5\n</parameter>\n</function>\n"
            "</tool_call>") in got
    assert ("<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\n20\n"
            "</tool_response><|im_end|>") in got
    assert got.endswith("<|im_start|>assistant\n<think>\n")
    tools_at, system_at = got.index("# Tools"), got.index("You are a helpful assistant.")
    assert tools_at < system_at                    # the system text after the tools


def test_qwen35_interleaved_thinking_and_tools():
    got = render_named("qwen3.5", [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Plan a picnic in Paris."},
        {"role": "assistant", "content": "Checking weather first.",
         "thinking": "Need weather before giving advice.",
         "tool_calls": [_call("get_weather", location="Paris")]},
        {"role": "tool", "content": "22C"},
        {"role": "assistant", "content": "Checking UV too.",
         "thinking": "Need UV index for sunscreen advice.",
         "tool_calls": [_call("get_uv", location="Paris")]},
        {"role": "tool", "content": "5"}], WEATHER_TOOLS)
    for thought, said, name in (("Need weather before giving advice.",
                                 "Checking weather first.", "get_weather"),
                                ("Need UV index for sunscreen advice.", "Checking UV too.",
                                 "get_uv")):
        assert (f"<|im_start|>assistant\n<think>\n{thought}\n</think>\n\n{said}\n\n"
                f"<tool_call>\n<function={name}>\n<parameter=location>\nParis\n</parameter>"
                "\n</function>\n</tool_call><|im_end|>") in got
    assert got.endswith("<|im_start|>assistant\n<think>\n")


def test_qwen35_assistant_prefill_with_thinking():
    got = render_named("qwen3.5", [
        {"role": "user", "content": "Write two words."},
        {"role": "assistant", "thinking": "Keep it short.", "content": "Hello world"}])
    assert got == ("<|im_start|>user\nWrite two words.<|im_end|>\n<|im_start|>assistant\n"
                   "<think>\nKeep it short.\n</think>\n\nHello world")


def test_qwen35_declares_tools_as_gos_json_with_spaces():
    got = render_named("qwen3.5", [{"role": "user", "content": "hi"}], WEATHER_TOOLS[:1])
    assert ('\n{"type": "function", "function": {"name": "get_weather", "description": '
            '"Get weather for a location", "parameters": {"type": "object", "required": '
            '["location"], "properties": {"location": {"type": "string"}}}}}\n</tools>') in got


# ornith_test.go: Qwen 3.5's prompt, every assistant turn's think block kept
HELLO = [{"role": "user", "content": "Say hello."},
         {"role": "assistant", "content": "Hello."},
         {"role": "user", "content": "Now say bye."}]


def test_ornith_keeps_assistant_history_think_blocks():
    assert render_named("ornith", HELLO) == (
        "<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>"
        "\n\nHello.<|im_end|>\n<|im_start|>user\nNow say bye.<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n")


def test_ornith_keeps_think_blocks_when_thinking_is_off():
    messages = [HELLO[0], dict(HELLO[1], thinking="Keep it short."), HELLO[2]]
    assert render_named("ornith", messages, None, False) == (
        "<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n<think>\n"
        "Keep it short.\n</think>\n\nHello.<|im_end|>\n<|im_start|>user\nNow say bye."
        "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


# -- Gemma 4's sizes: gemma4_reference_test.go (at the commit the JSON files name) --------

BASH_SMALL = [{"type": "function", "function": {
    "name": "bash", "description": "Run", "parameters": {
        "type": "object", "required": ["command"],
        "properties": {"command": {"type": "string", "description": "Cmd"}}}}}]
BASH_SMALL_DECLARATION = (
    '<|tool>declaration:bash{description:<|"|>Run<|"|>,parameters:{properties:{command:'
    '{description:<|"|>Cmd<|"|>,type:<|"|>STRING<|"|>}},required:[<|"|>command<|"|>],type:'
    '<|"|>OBJECT<|"|>}}<tool|>')


@pytest.mark.parametrize("name, expected", [
    ("gemma4", "<bos><|turn>user\nHello<turn|>\n<|turn>model\n"),
    ("gemma4-small", "<bos><|turn>user\nHello<turn|>\n<|turn>model\n"),
    ("gemma4-large", "<bos><|turn>user\nHello<turn|>\n<|turn>model\n<|channel>thought\n"
                     "<channel|>")])
def test_gemma4_variants_generation_prompt(name, expected):
    assert render_named(name, [{"role": "user", "content": "Hello"}]) == expected


def test_gemma4_large_omits_the_empty_thought_block_when_thinking():
    got = render_named("gemma4-large", [{"role": "user", "content": "Hello"}], None, True)
    assert got == "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHello<turn|>\n" \
        "<|turn>model\n"


@pytest.mark.parametrize("name, tail", [("gemma4-small", ""),
                                        ("gemma4-large", "<|channel>thought\n<channel|>")])
def test_gemma4_canonical_tool_continuations(name, tail):
    messages = [
        {"role": "user", "content": "Use the tool"},
        {"role": "assistant", "content": "First."},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"function": {"name": "bash", "arguments": {"command": None}}}]},
        {"role": "tool", "tool_name": "bash", "content": "done"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Next"}]
    q = '<|"|>'
    assert render_named(name, messages, BASH_SMALL) == (
        "<bos><|turn>system\n" + BASH_SMALL_DECLARATION + "<turn|>\n"
        "<|turn>user\nUse the tool<turn|>\n<|turn>model\nFirst."
        "<|tool_call>call:bash{command:null}<tool_call|>"
        f"<|tool_response>response:bash{{value:{q}done{q}}}<tool_response|>"
        "Checking.Done.<turn|>\n<|turn>user\nNext<turn|>\n<|turn>model\n" + tail)
