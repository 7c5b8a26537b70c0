"""tool_choice "required" (or a named tool) as a grammar: the reply is one call of one of
the tools, its arguments valid for the tool's schema, written as the model's format writes
calls (llguidance's Lark, tags as tokens where they are single tokens)."""

from __future__ import annotations

import json
from typing import Callable

from .format import Format, TextCall


def compact(schema: dict) -> dict:
    """schema for llguidance with JSON's whitespace fixed (", " and ": "): a free choice of
    whitespace lets a weak model pad a call until its tokens run out."""
    return dict(schema, **{"x-guidance": {"whitespace_flexible": False,
                                          "item_separator": ", ", "key_separator": ": "}})


def forced_call_grammar(fmt: Format, tools: list[dict], token_of: Callable[[str], int | None],
                        in_thinking: bool = False) -> str | None:
    """A grammar (llguidance's Lark) that makes the reply one call of one of tools, its
    arguments valid for the tool's parameter schema, written as fmt writes calls (None when
    fmt has no way to write one). token_of(tag) is the id of a tag that is a single token.
    in_thinking: the prompt opened a think block (MiniMax-M2's always do), which the reply
    closes first."""
    if (fmt.call_text is None and fmt.text_call is None and fmt.call_grammar is None) or \
            not tools:
        return None
    alternatives = []
    for tool in tools:
        function = tool.get("function", tool)
        schema = function.get("parameters") or {"type": "object"}
        if fmt.call_grammar is not None:
            alternatives.append(fmt.call_grammar(
                function["name"], schema, lambda text: _lark_text(text, fmt, token_of)))
            continue
        if fmt.text_call is not None:
            alternatives.append(_text_lark(function["name"], schema, fmt, fmt.text_call,
                                           token_of))
            continue
        write = fmt.call_text
        assert write is not None                 # checked above: text formats have none
        before, _, after = write(function["name"], "\x00").partition("\x00")
        alternatives.append(" ".join(filter(None, (
            _lark_text(before, fmt, token_of), "%json " + json.dumps(compact(schema)),
            _lark_text(after, fmt, token_of)))))
    calls = " | ".join(f"({a})" for a in alternatives)
    if in_thinking and fmt.think:
        calls = f'{_lark_text(fmt.think[1], fmt, token_of)} "\\n"? ({calls})'
    return "%llguidance {}\nstart: " + calls + "\n"


TEXT_VALUE = "/[^<\\n][^<]*/"          # a string parameter's text (up to the next tag)


def _text_lark(name: str, schema: dict, fmt: Format, syntax: TextCall, token_of) -> str:
    """A call of name as Lark, in a text-argument format's syntax: its required parameters
    in the schema's order, each value text (strings, an enum's words) or JSON of its
    schema."""
    parts = [_lark_text(syntax.start.format(name=name), fmt, token_of)]
    required = set(schema.get("required") or [])
    for parameter, spec in (schema.get("properties") or {}).items():
        if parameter not in required:
            continue
        spec = spec if isinstance(spec, dict) else {}
        string = spec.get("type") == "string"
        if string and spec.get("enum"):
            value = "(" + " | ".join(json.dumps(str(v)) for v in spec["enum"]) + ")"
        elif string:
            value = TEXT_VALUE
        else:
            value = "%json " + json.dumps(spec or {})
        kind = spec.get("type")
        fill = dict(parameter=parameter, string="true" if string else "false",
                    type="number" if kind == "integer" else kind or "string")
        parts += [_lark_text(syntax.parameter_open.format(**fill), fmt, token_of), value,
                  _lark_text(syntax.parameter_close.format(**fill), fmt, token_of)]
    parts.append(_lark_text(syntax.end, fmt, token_of))
    return " ".join(parts)


def _lark_text(text: str, fmt: Format, token_of) -> str:
    """text as Lark: its tags as token references where they are single tokens."""
    tags = fmt.tags
    parts, rest = [], text
    while rest:
        hits = [(rest.find(tag), tag) for tag in tags if tag in rest]
        if not hits:
            parts.append(json.dumps(rest))
            break
        where, tag = min(hits)
        if where:
            parts.append(json.dumps(rest[:where]))
        token = token_of(tag)
        parts.append(f"<[{token}]>" if token is not None else json.dumps(tag))
        rest = rest[where + len(tag):]
    return " ".join(parts)
