"""What Ollama's Go renderers print, written in Python: encoding/json's Marshal (compact,
map keys sorted, '<', '>' and '&' escaped, floats without a needless ".0"), fmt's %v of a
JSON value, a tool as Go's api.Tool marshals it (only the fields its structs have, in their
order), and the think value as api.ThinkValue reads it. The renderers match Ollama's prompts
byte for byte only where these match Go's output, so they live in one place."""

from __future__ import annotations

import json
from decimal import Decimal

# Go's encoder escapes these inside strings (HTML safety, and JavaScript's line separators)
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
               "\u2029": "\\u2029"}


class Ordered(dict):
    """A map Go keeps in insertion order (api's ordered maps: a call's arguments, a tool's
    properties, and structs' fields); a plain dict marshals with its keys sorted, as Go's
    map[string]any does."""


def _string(text: str, escape_html: bool) -> str:
    out = json.dumps(text, ensure_ascii=False)
    for char, escaped in _GO_ESCAPES.items():
        if char in out and (escape_html or char in "\u2028\u2029"):
            out = out.replace(char, escaped)
    return out


def _float(value: float) -> str:
    """encoding/json's float64: positional between 1e-6 and 1e21, else exponent form."""
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"json: unsupported value: {value}")
    if value == 0:
        return "0"
    magnitude = abs(value)
    if 1e-6 <= magnitude < 1e21:
        text = format(Decimal(repr(value)), "f")
        return text[:-2] if text.endswith(".0") else text
    mantissa, exponent = repr(value).split("e")
    return f"{mantissa.removesuffix('.0')}e{'-' if exponent[0] == '-' else '+'}" \
           f"{int(exponent.lstrip('+-')):02d}"


def marshal(value, escape_html: bool = True) -> str:
    """Go's json.Marshal of a JSON-like value (escape_html=False: an Encoder with
    SetEscapeHTML(false))."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return _string(value, escape_html)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(marshal(v, escape_html) for v in value) + "]"
    if isinstance(value, dict):
        keys = list(value) if isinstance(value, Ordered) else sorted(value)
        return "{" + ",".join(f"{_string(str(k), escape_html)}:{marshal(value[k], escape_html)}"
                              for k in keys) + "}"
    raise TypeError(f"json: unsupported type {type(value).__name__}")


def with_spaces(text: str) -> str:
    """A space after each ':' and ',' outside strings (renderers' marshalWithSpaces)."""
    out, in_string, escaped = [], False, False
    for char in text:
        out.append(char)
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in ":,":
            out.append(" ")
    return "".join(out)


def value_text(value) -> str:
    """fmt's %v of a JSON value as Go holds it (numbers are float64: 1e+06, 2.5, 3)."""
    if value is None:
        return "<nil>"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _g(float(value))
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "[" + " ".join(value_text(v) for v in value) + "]"
    if isinstance(value, dict):
        keys = list(value) if isinstance(value, Ordered) else sorted(value)
        return "map[" + " ".join(f"{k}:{value_text(value[k])}" for k in keys) + "]"
    return str(value)


def _g(value: float) -> str:
    """strconv's 'g' format at the shortest precision: exponent form below 1e-4 or from
    1e6 (Go's %v of a float64: 1e+06, 123456)."""
    if value == 0:
        return "0"
    digits = Decimal(repr(value)).normalize()
    sign, coefficient, exponent = digits.as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, coefficient))
    point = len(text) + exponent - 1               # the exponent of the first digit
    minus = "-" if sign else ""
    if point < -4 or point >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{minus}{mantissa}e{'-' if point < 0 else '+'}{abs(point):02d}"
    return minus + format(abs(digits), "f")


def call_argument(value) -> str:
    """A call's argument as Qwen's renderers write it (formatToolCallArgument): a string as
    is, a map or list as JSON, anything else as %v."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return marshal(value)
    return value_text(value)


# -- api.Tool, as Go decodes a request's tool and marshals it again ----------------------

def _property_type(kind):
    """PropertyType: one type as a string, several as a list."""
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    return kinds[0] if len(kinds) == 1 else kinds


def _property(spec: dict) -> Ordered:
    """api.ToolProperty: anyOf, type, items, description, enum, properties, required (each
    omitted when empty; other keys do not survive Go's decoding)."""
    out = Ordered()
    if spec.get("anyOf"):
        out["anyOf"] = [_property(p) for p in spec["anyOf"] if isinstance(p, dict)]
    if spec.get("type"):
        out["type"] = _property_type(spec["type"])
    if spec.get("items") is not None:
        out["items"] = spec["items"]
    if spec.get("description"):
        out["description"] = spec["description"]
    if spec.get("enum"):
        out["enum"] = list(spec["enum"])
    if spec.get("properties"):
        out["properties"] = properties(spec["properties"])
    if spec.get("required"):
        out["required"] = list(spec["required"])
    return out


def properties(specs) -> Ordered | None:
    if specs is None:
        return None
    return Ordered((name, _property(p if isinstance(p, dict) else {}))
                   for name, p in specs.items())


def parameters(spec: dict) -> Ordered:
    """api.ToolFunctionParameters: type, $defs, items, required, properties (null when
    missing: the field has no omitempty)."""
    out = Ordered(type=spec.get("type") or "")
    if spec.get("$defs") is not None:
        out["$defs"] = spec["$defs"]
    if spec.get("items") is not None:
        out["items"] = spec["items"]
    if spec.get("required"):
        out["required"] = list(spec["required"])
    out["properties"] = properties(spec.get("properties"))
    return out


def function(tool: dict) -> Ordered:
    """api.ToolFunction: name, description (omitted when empty), parameters."""
    spec = tool.get("function") or {}
    out = Ordered(name=spec.get("name") or "")
    if spec.get("description"):
        out["description"] = spec["description"]
    out["parameters"] = parameters(spec.get("parameters") or {})
    return out


def tool(spec: dict) -> Ordered:
    """api.Tool: type, items, function."""
    out = Ordered(type=spec.get("type") or "")
    if spec.get("items") is not None:
        out["items"] = spec["items"]
    out["function"] = function(spec)
    return out


# -- messages and the think value -----------------------------------------------------

def calls(message: dict) -> list[tuple[str, Ordered, str]]:
    """A message's tool calls: (name, arguments in their order, id)."""
    found = []
    for call in message.get("tool_calls") or []:
        spec = call.get("function") or {}
        arguments = spec.get("arguments") or {}
        if isinstance(arguments, str):
            arguments = json.loads(arguments or "{}")
        found.append((spec.get("name") or "", Ordered(arguments), call.get("id") or ""))
    return found


def thinking(message: dict) -> str:
    return message.get("thinking") or message.get("reasoning_content") or ""


def think_bool(think) -> bool:
    """ThinkValue.Bool(): true, or any level; this server's "off" and False are off."""
    if isinstance(think, bool):
        return think
    return think in ("low", "medium", "high", "max")
