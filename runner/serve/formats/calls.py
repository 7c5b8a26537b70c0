"""What reading calls back takes in every family: a call is (name, arguments[, id]) from the
text between the family's call tags (None: not a call). json_call() reads the JSON most
families write (each family's own syntax is in its module), typed() types text arguments by
their schema, closed_json() closes JSON that a length limit cut off."""

from __future__ import annotations

import json
import re
import secrets
import string
from typing import Callable

ALPHANUMERIC = string.ascii_letters + string.digits


def call_id() -> str:
    return "call_" + "".join(secrets.choice(ALPHANUMERIC) for _ in range(8))


def json_call(body: str) -> tuple[str, dict] | list | None:
    """{"name": ..., "arguments" (or "parameters"): {...}} -> (name, arguments); a list of
    them (SmolLM2's form) -> a list of those."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return None
    if isinstance(value, list):
        calls = [_object_call(item) for item in value]
        return calls if calls and None not in calls else None
    return _object_call(value)


def json_lines_call(body: str) -> tuple[str, dict] | list | None:
    """json_call's forms, or one call's JSON object a line (MiniMax-M1's)."""
    parsed = json_call(body)
    if parsed is not None or "\n" not in body.strip():
        return parsed
    calls = [json_call(line) for line in body.splitlines() if line.strip()]
    return calls if calls and None not in calls else None


def named_call(name: str, arguments: str, ident: str | None = None) -> tuple | None:
    """(name, the JSON object arguments[, ident]): the call of families that write the
    name and the arguments' JSON apart; None where the JSON is not an object."""
    try:
        value = json.loads(arguments.strip() or "{}")
    except json.JSONDecodeError:
        return None
    if not name.strip() or not isinstance(value, dict):
        return None
    return (name.strip(), value) if ident is None else (name.strip(), value, ident)


NAME_KEYS = ("name", "tool_name")               # Command R's calls name a "tool_name"


def _object_call(value) -> tuple[str, dict] | None:
    name = next((value[k] for k in NAME_KEYS if isinstance(value, dict) and k in value), None)
    if not isinstance(name, str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    return (name, arguments) if isinstance(arguments, dict) else None


def head_and_pairs(head: str, pair: str, clean: Callable[[str], str] = str):
    """The parser of a call whose arguments are text between tags: head's group, matched at
    the body's start, is the tool's name; pair's two groups, found in the rest (cleaned
    first), are each argument's key and value."""
    head_pattern, pair_pattern = re.compile(head), re.compile(pair, re.S)

    def parse(body: str) -> tuple[str, dict] | None:
        found = head_pattern.match(body)
        if found is None:
            return None
        return found.group(1), dict(pair_pattern.findall(clean(body[found.end():])))
    return parse


def closed_json(text: str) -> str:
    """JSON cut off somewhere, closed where it stopped: an open string ended, a key without
    its value or a dangling separator dropped, open arrays and objects closed (a call cut by
    max_tokens is still a call, with the arguments it got to)."""
    closers: list[str] = []
    in_string, escaped = False, False
    key_at = None                  # where an object's key began, until its value does
    last = ""                      # the last character outside strings, spaces aside
    for at, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if last == ":" and not char.isspace():
            key_at = None                        # its value begins
        if char == '"':
            in_string = True
            if closers and closers[-1] == "}" and last in "{,":
                key_at = at
        elif char in "{[":
            closers.append("}" if char == "{" else "]")
        elif char in "}]" and closers:
            closers.pop()
        if not char.isspace():
            last = char
    if key_at is not None:                       # a key cut off, or not yet given a value
        text = text[:key_at]
    elif in_string:
        text = text[:-1] if escaped else text
        text += '"'
    text = text.rstrip()
    while text and text[-1] in ",:":
        text = text[:-1].rstrip()
    for word in ("true", "false", "null"):              # a literal cut off
        cut = next((n for n in range(len(word) - 1, 0, -1) if text.endswith(word[:n])), 0)
        if cut and text[:-cut].rstrip()[-1:] in (":", ",", "["):
            text += word[cut:]
            break
    return text + "".join(reversed(closers))


SCALARS = {"integer": int, "number": float}


def typed(arguments: dict, schema: dict | None) -> dict:
    """Text arguments (Qwen3-Coder's) as their schema's types: numbers, booleans, objects and
    arrays parsed, strings as written; without a schema, JSON objects and arrays parsed."""
    properties = (schema or {}).get("properties") or {}
    found = {}
    for name, text in arguments.items():
        kind = (properties.get(name) or {}).get("type")
        kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
        found[name] = _typed(text, kind)
    return found


def _typed(text: str, kind):
    if kind == "string" or not isinstance(text, str):
        return text
    if kind in SCALARS:
        try:
            number = float(text.strip())
            return int(number) if kind == "integer" and number.is_integer() else number
        except ValueError:
            return text
    if kind == "boolean":
        return {"true": True, "false": False}.get(text.strip().lower(), text)
    if kind in ("object", "array") or text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return text


def closed_after(separator: str):
    """A repair for calls written NAME<separator>JSON: the JSON after it closed."""
    def repair(body: str) -> str:
        head, found, tail = body.partition(separator)
        return head + found + closed_json(tail) if found else body
    return repair
