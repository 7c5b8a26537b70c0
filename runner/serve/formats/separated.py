"""The families that write a call between tokens of their own: Kimi K2
(<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{json}<|tool_call_end|>,
the "functions.NAME:INDEX" its call id), Solar Open
(<|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{json}<|tool_call:end|>) and
Kimi K3, whose tags are <|open|>TAG attributes<|sep|> ... <|close|>TAG<|sep|>
(call tool="NAME", then an argument key="K" per argument, values as text)."""

from __future__ import annotations


from .calls import closed_after, head_and_pairs, named_call
from .format import Format, TextCall, register

KIMI_ARGUMENTS = "<|tool_call_argument_begin|>"
SOLAR_NAME, SOLAR_ARGUMENTS = "<|tool_call:name|>", "<|tool_call:args|>"


def kimi_call(body: str) -> tuple | None:
    ident, found, arguments = body.partition(KIMI_ARGUMENTS)
    if not found:
        return None
    name = ident.strip().removeprefix("functions.").rsplit(":", 1)[0]
    return named_call(name, arguments, ident.strip())


def solar_call(body: str) -> tuple | None:
    ident, found, rest = body.partition(SOLAR_NAME)
    name, found_args, arguments = rest.partition(SOLAR_ARGUMENTS)
    if not (found and found_args):
        return None
    return named_call(name, arguments, ident.strip() or None)


# the body after <|open|>call: tool="NAME" index="N"<|sep|> and its arguments
kimi_k3_call = head_and_pairs(r'\s*tool="([^"]+)"[^<]*<\|sep\|>',
                              r'<\|open\|>argument key="([^"]+)"[^<]*<\|sep\|>(.*?)'
                              r'(?:<\|close\|>argument<\|sep\|>|\Z)')


def k3_tags(*names: str) -> tuple[str, ...]:
    return tuple(tag for name in names for tag in (f"<|open|>{name}<|sep|>",
                                                   f"<|close|>{name}<|sep|>"))


KIMI_K3 = register(Format(
    "kimi-k3", lambda t: "'<|open|>' + tag" in t,
    think=("<|open|>think<|sep|>", "<|close|>think<|sep|>"),
    tool=("<|open|>call", "<|close|>call<|sep|>"), parse_call=kimi_k3_call,
    drop=k3_tags("tools", "response", "message"), typed_arguments=True,
    text_call=TextCall('<|open|>tools<|sep|><|open|>call tool="{name}" index="1"<|sep|>',
                       '<|open|>argument key="{parameter}" type="{type}"<|sep|>',
                       "<|close|>argument<|sep|>", "<|close|>call<|sep|><|close|>tools<|sep|>"),
    special_tags=("<|open|>", "<|close|>", "<|sep|>")), rank=25)
KIMI_K2 = register(Format(
    "kimi-k2", lambda t: "<|tool_call_begin|>" in t, think=("<think>", "</think>"),
    tool=("<|tool_call_begin|>", "<|tool_call_end|>"), parse_call=kimi_call,
    drop=("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
    repair=closed_after(KIMI_ARGUMENTS), arguments_after=(KIMI_ARGUMENTS,),
    call_text=lambda name, args: f"<|tool_calls_section_begin|><|tool_call_begin|>functions."
                                 f"{name}:0{KIMI_ARGUMENTS}{args}<|tool_call_end|>"
                                 "<|tool_calls_section_end|>"), rank=25)
SOLAR_OPEN = register(Format(
    "solar-open", lambda t: "<|tool_call:begin|>" in t,
    tool=("<|tool_call:begin|>", "<|tool_call:end|>"), parse_call=solar_call,
    drop=("<|tool_calls|>", "<|calls|>"),
    repair=closed_after(SOLAR_ARGUMENTS), arguments_after=(SOLAR_ARGUMENTS,),
    special_tags=(SOLAR_NAME, SOLAR_ARGUMENTS),
    call_text=lambda name, args: f"<|tool_calls|><|tool_call:begin|>{SOLAR_NAME}{name}"
                                 f"{SOLAR_ARGUMENTS}{args}<|tool_call:end|><|calls|>"), rank=25)
