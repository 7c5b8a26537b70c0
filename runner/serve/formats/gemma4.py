"""Gemma 4's format: thinking in <|channel>thought ... <channel|>, calls as
<|tool_call>call:NAME{key:<|"|>text<|"|>,count:3}<tool_call|> (its own object syntax, strings
between <|"|>), which a forced call's grammar writes from the tool's schema."""

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


def gemma_value(schema: dict, text) -> str:
    """A value of schema in Gemma's syntax, as Lark (text(literal) -> its Lark): objects of
    their required properties with bare keys, strings between <|"|> (without "<"), arrays
    of such values, other values as JSON."""
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        required = set(schema.get("required") or [])
        parts, first = [text("{")], True
        for name, spec in (schema.get("properties") or {}).items():
            if name in required:
                parts += [text(("" if first else ",") + f"{name}:"),
                          gemma_value(spec if isinstance(spec, dict) else {}, text)]
                first = False
        return " ".join(parts + [text("}")])
    if kind == "string":
        if schema.get("enum"):
            return "(" + " | ".join(text(f"{GEMMA_STRING}{v}{GEMMA_STRING}")
                                    for v in schema["enum"]) + ")"
        return f"{text(GEMMA_STRING)} /[^<]*/ {text(GEMMA_STRING)}"
    if kind == "array" and isinstance(schema.get("items"), dict):
        item = gemma_value(schema["items"], text)
        return f'{text("[")} ({item} ({text(",")} {item})*)? {text("]")}'
    return "%json " + json.dumps(schema or {})


def gemma_call_grammar(name: str, schema: dict, text) -> str:
    return " ".join([text(f"<|tool_call>call:{name}"), gemma_value(schema, text),
                     text("<tool_call|>")])


GEMMA4 = register(Format(
    "gemma4", lambda t: "<|tool_call>" in t or "<|channel>" in t,
    think=("<|channel>", "<channel|>"), think_label="thought\n",
    tool=("<|tool_call>", "<tool_call|>"), parse_call=gemma_call,
    call_grammar=gemma_call_grammar, special_tags=(GEMMA_STRING,)), rank=20)
