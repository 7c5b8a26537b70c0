"""Qwen's formats: Qwen 3's (and Hermes') <think> and <tool_call>{json}</tool_call>, and
Qwen3-Coder's and Qwen 3.5's XML parameters inside <tool_call>
(<function=NAME><parameter=P>value</parameter></function>, values as text that the tool's
schema types), which Seed-OSS writes inside <seed:tool_call> after <seed:think>; MiniCPM 5's
<function name="NAME"><param name="P">value</param></function>."""

from __future__ import annotations

import re

from .calls import head_and_pairs
from .format import Format, TextCall, register

XML_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>")
XML_PARAMETER = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)(?:\n?</parameter>|\Z)", re.S)


def xml_call(body: str) -> tuple[str, dict] | None:
    """Qwen3-Coder's <function=NAME><parameter=P>value</parameter>...</function> -> (name,
    arguments as text; typed() converts them by the tool's schema)."""
    found = XML_FUNCTION.match(body)
    if found is None:
        return None
    rest = body[found.end():].split("</function>", 1)[0]
    return found.group(1).strip(), {name.strip(): value for name, value in
                                    XML_PARAMETER.findall(rest)}


def xml_text_call(opening: str, closing: str) -> TextCall:
    """Qwen3-Coder's call syntax inside a family's call tags."""
    return TextCall(f"{opening}\n<function={{name}}>\n", "<parameter={parameter}>\n",
                    "\n</parameter>\n", f"</function>\n{closing}")


# MiniCPM 5's body after <function: name="NAME"><param name="P">value</param>...
minicpm_call = head_and_pairs(r'\s*name="([^"]+)"\s*>',
                              r'<param name="([^"]+)"\s*>(.*?)(?:</param>|\Z)')


SEED_OSS = register(Format(
    "seed-oss", lambda t: "<seed:tool_call>" in t,
    think=("<seed:think>", "</seed:think>"), tool=("<seed:tool_call>", "</seed:tool_call>"),
    parse_call=xml_call, typed_arguments=True, body_end="</function>",
    text_call=xml_text_call("<seed:tool_call>", "</seed:tool_call>")), rank=25)

MINICPM5 = register(Format(
    "minicpm5", lambda t: "<function name=" in t, think=("<think>", "</think>"),
    tool=("<function", "</function>"), parse_call=minicpm_call, typed_arguments=True,
    text_call=TextCall('<function name="{name}">', '<param name="{parameter}">', "</param>",
                       "</function>")), rank=25)

# XML parameters inside <tool_call>: before Qwen's JSON, whose tags it shares
QWEN3_CODER = register(Format(
    "qwen3coder", lambda t: "<function=" in t and "<parameter=" in t,
    think=("<think>", "</think>"), tool=("<tool_call>", "</tool_call>"),
    parse_call=xml_call, typed_arguments=True, body_end="</function>",
    text_call=xml_text_call("<tool_call>", "</tool_call>")), rank=30)

QWEN = register(Format(
    "qwen", lambda t: "<tool_call>" in t or "<think>" in t,
    think=("<think>", "</think>"), tool=("<tool_call>", "</tool_call>"),
    call_text=lambda name, args: f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}'
                                 "\n</tool_call>"), rank=60)
