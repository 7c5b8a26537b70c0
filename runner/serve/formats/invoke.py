"""The families that write each call as <invoke name="NAME"> with a
<parameter name="P">value</parameter> per argument, their tags under a prefix: MiniMax-M2
(none, inside <minimax:tool_call>), DeepSeek V3.2 and V4 ("｜DSML｜", inside
<｜DSML｜function_calls> or <｜DSML｜tool_calls>), muse ("atem:", glimmer.py). Values are
text that the tool's schema types (DeepSeek marks each string="true" or not: the schema says
the same).
MiniMax-M3 writes its parameters as <NAME>value</NAME>, each tag after its separator token
"]<]minimax[>[", inside <tool_call>."""

from __future__ import annotations

import re

from .calls import head_and_pairs
from .format import Format, TextCall, register


INVOKE_HEAD = r'\s*name="([^"]+)"[^>]*>'


def invoke_call(prefix: str = ""):
    """The parser of the body after <{prefix}invoke: ` name="NAME">` and its parameters."""
    return head_and_pairs(INVOKE_HEAD, rf'<{re.escape(prefix)}parameter name="([^"]+)"[^>]*>'
                                       rf'(.*?)(?:</{re.escape(prefix)}parameter>|\Z)')


def invoke_format(name: str, recognize, prefix: str, wrappers: tuple[str, ...],
                  think: tuple[str, str] | None = ("<think>", "</think>"),
                  string: bool = False) -> Format:
    """A format of this syntax: calls wrapped in any of wrappers (the first written in a
    forced call); string: parameters say whether their value is a string (DeepSeek's)."""
    attribute = ' string="{string}"' if string else ""
    return Format(name, recognize, think=think,
                  tool=(f"<{prefix}invoke", f"</{prefix}invoke>"),
                  drop=tuple(w for tag in wrappers for w in (f"<{tag}>", f"</{tag}>")),
                  parse_call=invoke_call(prefix), typed_arguments=True,
                  text_call=TextCall(
                      f'<{wrappers[0]}>\n<{prefix}invoke name="{{name}}">\n',
                      f'<{prefix}parameter name="{{parameter}}"{attribute}>',
                      f"</{prefix}parameter>\n", f"</{prefix}invoke>\n</{wrappers[0]}>"))


M3_SEPARATOR = "]<]minimax[>["
# the body after <invoke: name="NAME">, then <P>value</P> per parameter, separators aside
minimax_m3_call = head_and_pairs(INVOKE_HEAD, r"<([^/>\s]+)>(.*?)</\1>",
                                 lambda rest: rest.replace(M3_SEPARATOR, ""))


DSML = "｜DSML｜"
MINIMAX_M2 = register(invoke_format(
    "minimax-m2", lambda t: "<minimax:tool_call>" in t, "", ("minimax:tool_call",)), rank=20)
DEEPSEEK_V32 = register(invoke_format(         # V3.2 wraps calls in function_calls
    "deepseek-v3.2", lambda t: DSML in t and "function_calls" in t, DSML,
    (f"{DSML}function_calls", f"{DSML}tool_calls"), string=True), rank=20)
DEEPSEEK_V4 = register(invoke_format(          # V4 in tool_calls
    "deepseek-v4", lambda t: DSML in t, DSML,
    (f"{DSML}tool_calls", f"{DSML}function_calls"), string=True), rank=21)
MINIMAX_M3 = register(Format(
    "minimax-m3", lambda t: f"'{M3_SEPARATOR}'" in t, think=("<mm:think>", "</mm:think>"),
    tool=("<invoke", "</invoke>"), drop=(M3_SEPARATOR, "<tool_call>", "</tool_call>"),
    parse_call=minimax_m3_call, typed_arguments=True, special_tags=(M3_SEPARATOR,),
    text_call=TextCall(f'{M3_SEPARATOR}<tool_call>\n{M3_SEPARATOR}<invoke name="{{name}}">',
                       f"{M3_SEPARATOR}<{{parameter}}>", f"{M3_SEPARATOR}</{{parameter}}>",
                       f"{M3_SEPARATOR}</invoke>\n{M3_SEPARATOR}</tool_call>")), rank=20)
