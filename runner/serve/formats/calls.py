"""How each model family writes a tool call, read back: (name, arguments[, id]) from the
text between the family's call tags (none: not a call). Qwen 3 and Hermes write JSON, Gemma
4 its own object syntax, Qwen3-Coder and Qwen 3.5 XML parameters, Mistral a name then
[ARGS] and JSON (or, before v11, a JSON array of calls), DeepSeek V3.1 a name, a separator
and JSON. closed_json() closes JSON that a length limit cut off."""

from __future__ import annotations

import json
import re
import secrets
import string

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


def _object_call(value) -> tuple[str, dict] | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    return (value["name"], arguments) if isinstance(arguments, dict) else None


GEMMA_STRING = '<|"|>'
GEMMA_KEY = re.compile(r'([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*:)')


def gemma_call(body: str) -> tuple[str, dict] | None:
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




def closed_json(text: str) -> str:
    """JSON cut off somewhere, closed where it stopped: an open string ended, a key without
    its value or a dangling separator dropped, open arrays and objects closed (a call cut by
    max_tokens is still a call, with the arguments it got to)."""
    closers, in_string, escaped = [], False, False
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


MISTRAL_ID = 9                 # Mistral's templates take alphanumeric call ids of 9


def mistral_id() -> str:
    return "".join(secrets.choice(ALPHANUMERIC) for _ in range(MISTRAL_ID))


def mistral_calls(body: str) -> list[tuple] | None:
    """After [TOOL_CALLS]: NAME[ARGS]{json} or NAME[CALL_ID]ID[ARGS]{json} (v11 on), or a
    JSON array (or object) of {"name", "arguments", "id"} (before)."""
    text = body.strip()
    if text[:1] in ("[", "{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        calls = []
        for item in value if isinstance(value, list) else [value]:
            parsed = json_call(json.dumps(item)) if isinstance(item, dict) else None
            if parsed is None:
                return None
            calls.append((*parsed, item.get("id") or mistral_id()))
        return calls or None
    name, args_tag, arguments = text.partition("[ARGS]")
    if not args_tag:
        return None
    name, _, ident = name.partition("[CALL_ID]")
    parsed = json_call(json.dumps({"name": name.strip(), "arguments": "__"}).replace(
        '"__"', arguments.strip() or "{}"))
    return None if parsed is None else [(*parsed, ident.strip() or mistral_id())]


DEEPSEEK_SEPARATOR = "<｜tool▁sep｜>"


def deepseek_call(body: str) -> tuple[str, dict] | None:
    """DeepSeek V3.1's NAME<｜tool▁sep｜>{json} (between its call begin and end)."""
    name, separator, arguments = body.partition(DEEPSEEK_SEPARATOR)
    if not separator:
        return None
    return json_call(json.dumps({"name": name.strip(), "arguments": "__"}).replace(
        '"__"', arguments.strip() or "{}"))
