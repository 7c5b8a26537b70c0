"""DeepSeek V3.1's format: <think>, and calls as NAME<｜tool▁sep｜>{json} between its
call tokens, the calls wrapped in its calls-begin and calls-end tokens; the R1 distills
write function<｜tool▁sep｜>NAME and the JSON in a code fence."""

from __future__ import annotations

import json

from .calls import closed_after, json_call, named_call
from .format import Format, register

DEEPSEEK_SEPARATOR = "<｜tool▁sep｜>"


def deepseek_call(body: str) -> tuple[str, dict] | list | None:
    """DeepSeek V3.1's NAME<｜tool▁sep｜>{json} (between its call begin and end)."""
    name, separator, arguments = body.partition(DEEPSEEK_SEPARATOR)
    if not separator:
        return None
    fenced = arguments.partition("```json")
    if name.strip() == "function" and fenced[1]:          # R1's NAME ```json {json} ```
        return named_call(fenced[0], fenced[2].split("```", 1)[0])
    return json_call(json.dumps({"name": name.strip(), "arguments": "__"}).replace(
        '"__"', arguments.strip() or "{}"))


DEEPSEEK3 = register(Format(
    "deepseek3", lambda t: "<｜tool▁call▁begin｜>" in t,
    think=("<think>", "</think>"), tool=("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"),
    parse_call=deepseek_call, drop=("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
    repair=closed_after(DEEPSEEK_SEPARATOR),
    arguments_after=('"arguments"', '"parameters"', DEEPSEEK_SEPARATOR),
    call_text=lambda name, args: f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}"
                                 f"<｜tool▁sep｜>{args}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    rank=50)
