"""Gemma 4's format: thinking in <|channel>thought ... <channel|>, calls as
<|tool_call>call:NAME{key:<|"|>text<|"|>,count:3}<tool_call|> (its own object syntax, strings
between <|"|>)."""

from __future__ import annotations

import json
import re

from .calls import json_call
from .format import Format, register

GEMMA_STRING = '<|"|>'
GEMMA_KEY = re.compile(r'([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*:)')


def gemma_call(body: str) -> tuple[str, dict] | list | None:
    """call:name{key:<|"|>text<|"|>,count:3} -> (name, arguments)."""
    found = re.match(r"\s*call:([A-Za-z0-9_.\-]+)\s*(\{.*\})\s*$", body, re.S)
    if found is None:
        return None
    pieces = found.group(2).split(GEMMA_STRING)
    if len(pieces) % 2 == 0:
        return None
    # outside strings: quote the bare keys; inside: JSON strings
    text = "".join(GEMMA_KEY.sub(r'\1"\2"\3', piece) if i % 2 == 0 else json.dumps(piece)
                   for i, piece in enumerate(pieces))
    return json_call(json.dumps({"name": found.group(1), "arguments": "__ARGS__"})
                      .replace('"__ARGS__"', text))


GEMMA4 = register(Format(
    "gemma4", lambda t: "<|tool_call>" in t or "<|channel>" in t,
    think=("<|channel>", "<channel|>"), think_label="thought\n",
    tool=("<|tool_call>", "<tool_call|>"), parse_call=gemma_call), rank=20)
