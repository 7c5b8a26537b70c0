"""GLM 4.5 to 4.7's format (and the families that took it: Ling 3, Spark 2.5, Laguna,
Tencent Hy3 with its ":opensource" tags): <think>, and calls as
<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>, values as text
that the tool's schema types."""

from __future__ import annotations

import re

from .format import Format, TextCall, register


def arg_key_call(suffix: str = ""):
    """The parser of NAME then <arg_key{suffix}>K</arg_key{suffix}><arg_value{suffix}>V
    </arg_value{suffix}> pairs (Hy3 puts <tool_sep{suffix}> after the name)."""
    pair = re.compile(rf"<arg_key{suffix}>(.*?)</arg_key{suffix}>\s*"
                      rf"<arg_value{suffix}>(.*?)(?:</arg_value{suffix}>|\Z)", re.S)
    head = re.compile(rf"\s*([^<\n]+?)\s*(?:<tool_sep{suffix}>|(?=<arg_key{suffix}>)|\Z)")

    def parse(body: str) -> tuple[str, dict] | None:
        found = head.match(body)
        if found is None:
            return None
        rest = body[found.end():]
        if rest.strip() and not rest.lstrip().startswith(f"<arg_key{suffix}>"):
            return None
        return found.group(1), {key.strip(): value for key, value in pair.findall(rest)}
    return parse


GLM = register(Format(
    "glm", lambda t: "<arg_key>" in t,
    think=("<think>", "</think>"), tool=("<tool_call>", "</tool_call>"),
    parse_call=arg_key_call(), typed_arguments=True, body_end="</arg_value>",
    text_call=TextCall("<tool_call>{name}\n", "<arg_key>{parameter}</arg_key>\n<arg_value>",
                       "</arg_value>\n", "</tool_call>")), rank=20)

HY3_TAG = ":opensource"
HY3 = register(Format(
    "hy3", lambda t: f"'{HY3_TAG}'" in t and "arg_key" in t,
    think=(f"<think{HY3_TAG}>", f"</think{HY3_TAG}>"),
    tool=(f"<tool_call{HY3_TAG}>", f"</tool_call{HY3_TAG}>"),
    drop=(f"<tool_calls{HY3_TAG}>", f"</tool_calls{HY3_TAG}>"),
    parse_call=arg_key_call(HY3_TAG), typed_arguments=True,
    body_end=f"</arg_value{HY3_TAG}>",
    text_call=TextCall(
        f"<tool_calls{HY3_TAG}>\n<tool_call{HY3_TAG}>{{name}}<tool_sep{HY3_TAG}>\n",
        f"<arg_key{HY3_TAG}>{{parameter}}</arg_key{HY3_TAG}>\n<arg_value{HY3_TAG}>",
        f"</arg_value{HY3_TAG}>\n", f"</tool_call{HY3_TAG}>\n</tool_calls{HY3_TAG}>")), rank=20)
