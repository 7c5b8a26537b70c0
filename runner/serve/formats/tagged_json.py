"""The families that write calls as JSON between tags of their own: Apriel and MiniMax-M1
(<tool_calls>[...]</tool_calls>, M1 an object a line), Nemotron Nano 2 (<TOOLCALL>),
GigaChat 3.1 (<|function_call|>) and 3 (a "function call" message), Command R7B and
Cohere 2 (<|START_ACTION|>, calls naming a "tool_name"), Apertus ([{"NAME": {arguments}}]
between its tools tokens), FireFunction v2 (" functools[...]"), Granite 3.x (<|tool_call|>
and a JSON list, its answer after thinking wrapped in <response>); Command R+ writes
"Action:" and a JSON list of them in a code fence."""

from __future__ import annotations

import json

from .calls import json_call, json_lines_call, named_call
from .format import Format, register


def keyed_calls(body: str) -> list | None:
    """Apertus' [{"NAME": {arguments}}, ...]."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return None
    calls = []
    for item in value if isinstance(value, list) else [value]:
        if not isinstance(item, dict) or len(item) != 1:
            return None
        (name, arguments), = item.items()
        calls.append(named_call(name, json.dumps(arguments)))
    return calls if calls and None not in calls else None


def fenced_calls(body: str) -> tuple | list | None:
    """json_call's forms inside a ```json code fence (or without one)."""
    text = body.strip().removeprefix("```json").removeprefix("```").removesuffix("```")
    return json_call(text)


TOOL_CALLS = register(Format(
    "tool-calls-json", lambda t: "<tool_calls>" in t, think=("<think>", "</think>"),
    tool=("<tool_calls>", "</tool_calls>"), parse_call=json_lines_call,
    call_text=lambda name, args: f'<tool_calls>[{{"name": "{name}", "arguments": {args}}}]'
                                 "</tool_calls>"), rank=25)
NEMOTRON_NANO2 = register(Format(
    "nemotron-nano2", lambda t: "<TOOLCALL>" in t, think=("<think>", "</think>"),
    tool=("<TOOLCALL>", "</TOOLCALL>"), parse_call=json_call,
    call_text=lambda name, args: f'<TOOLCALL>[{{"name": "{name}", "arguments": {args}}}]'
                                 "</TOOLCALL>"), rank=25)
GIGACHAT = register(Format(
    "gigachat", lambda t: "<|function_call|>" in t,
    tool=("<|function_call|>", None), parse_call=json_call,
    call_text=lambda name, args: f'<|function_call|>{{"name": "{name}", "arguments": {args}}}'),
    rank=25)
GIGACHAT3 = register(Format(                     # GigaChat 3: a "function call" message
    "gigachat3", lambda t: "'function call'" in t and "<|role_sep|>" in t,
    tool=("function call<|role_sep|>", None), parse_call=json_call,
    call_text=lambda name, args: f'function call<|role_sep|>\n{{"name": "{name}", '
                                 f'"arguments": {args}}}'), rank=26)
COHERE = register(Format(
    "cohere", lambda t: "<|START_ACTION|>" in t,
    think=("<|START_THINKING|>", "<|END_THINKING|>"),
    tool=("<|START_ACTION|>", "<|END_ACTION|>"), parse_call=json_call,
    drop=("<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_TEXT|>", "<|END_TEXT|>"),
    call_text=lambda name, args: f'<|START_ACTION|>[{{"tool_call_id": "0", "tool_name": '
                                 f'"{name}", "parameters": {args}}}]<|END_ACTION|>'), rank=25)
COMMAND_R_PLUS = register(Format(
    "command-r-plus", lambda t: "Action:" in t and "<|CHATBOT_TOKEN|>" in t,
    tool=("Action:", None), parse_call=fenced_calls,
    call_text=lambda name, args: f'Action:\n```json\n[{{"tool_name": "{name}", '
                                 f'"parameters": {args}}}]\n```'), rank=26)
APERTUS = register(Format(
    "apertus", lambda t: "<|tools_prefix|>" in t,
    tool=("<|tools_prefix|>", "<|tools_suffix|>"), parse_call=keyed_calls,
    call_text=lambda name, args: f'<|tools_prefix|>[{{"{name}": {args}}}]<|tools_suffix|>'),
    rank=25)
FIREFUNCTION = register(Format(
    "firefunction", lambda t: "functools[" in t, tool=("functools", None),
    parse_call=json_call,
    call_text=lambda name, args: f' functools[{{"name": "{name}", "arguments": {args}}}]'),
    rank=25)
GRANITE = register(Format(                       # Granite 3.x (4.x writes Qwen's <tool_call>)
    "granite", lambda t: "<|tool_call|>" in t, think=("<think>", "</think>"),
    tool=("<|tool_call|>", None), parse_call=json_call, drop=("<response>", "</response>"),
    call_text=lambda name, args: f'<|tool_call|>[{{"name": "{name}", "arguments": {args}}}]'),
    rank=25)
