"""Go's text/template, the subset Ollama's model templates use, for pulled models whose GGUF
carries no chat template of its own.

The language: text and {{ actions }} with trim markers ({{- and -}}) and comments; fields
(.Messages, .Function.Name, $.Tools, $var.Field, (pipeline).Field), string, number and
boolean constants, variables declared (:=) and assigned (=) with Go's scopes, pipelines
(a | f: the value as f's last argument); if / else if / else, range (over lists and maps,
with $i, $v :=, else, break and continue), with; the functions and, or, not, eq, ne, lt,
le, gt, ge, len, index, slice, print, printf, println, and Ollama's json, currentDate and
yesterdayDate. Values print as Go prints them; maps, lists and the structs Ollama hands its
templates (tools, tool call arguments) print as JSON, as their String methods do.

A template comes from whoever published the model, so a render is bounded as the Jinja
sandbox bounds one (sandbox.py's time and size): a range over a huge number, a value doubled
in a loop, a printf width or blocks nested past reason stop with a GoTemplateError.

parse() (goparse.py) makes a template's tree once; execute() renders it with data.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from dataclasses import dataclass

from .goparse import GoTemplateError, Node, parse
from .sandbox import LONGEST, SECONDS, WIDE_FORMAT

__all__ = ["Budget", "GoTemplateError", "Node", "Struct", "execute", "parse"]


class Budget:
    """One render's bounds: seconds of work and LONGEST characters written or held."""

    def __init__(self, seconds: float = SECONDS):
        self.seconds, self.deadline = seconds, time.monotonic() + seconds
        self.left = LONGEST

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise GoTemplateError(f"the template ran longer than {self.seconds:g} s")

    def spend(self, text: str) -> None:
        self.left -= len(text)
        if self.left < 0:
            raise GoTemplateError(f"the template wrote more than {LONGEST} characters")


class Struct(dict):
    """A Go struct a template reads by field (its Go names) and prints as its JSON."""

    def __init__(self, fields: dict, as_json):
        super().__init__(fields)
        self.as_json = as_json


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Stop(Exception):
    pass


def execute(nodes: list[Node], data, stop_after: str | None = None,
            budget: Budget | None = None) -> str:
    """The text of nodes over data; stop_after: a field name after whose first printing
    nothing more is written (Ollama cuts a legacy template after .Response). budget: the
    bounds this render shares with others of the same prompt (a new one where None)."""
    out: list[str] = []
    budget = budget or Budget()
    try:
        _run(nodes, data, [{"$": data}], _Output(out, budget), stop_after)
    except _Stop:
        pass
    except RecursionError:
        raise GoTemplateError("the template's blocks are nested too deeply") from None
    return "".join(out)


@dataclass
class _Output:
    pieces: list
    budget: Budget

    def append(self, text: str) -> None:
        self.budget.spend(text)
        self.pieces.append(text)


def _run(nodes, dot, scopes, out, stop_after):
    out.budget.tick()
    for node in nodes:
        if node.kind == "text":
            out.append(node.text)
        elif node.kind == "print":
            out.append(go_string(_pipe(node.pipe, dot, scopes)))
            if stop_after and _mentions(node.pipe, stop_after):
                raise _Stop
        elif node.kind == "set":
            value = _pipe(node.pipe, dot, scopes)
            if node.declare:
                scopes[-1][node.names[0]] = value
            else:
                scope = next((s for s in reversed(scopes) if node.names[0] in s), None)
                if scope is None:
                    raise GoTemplateError(f"undefined variable {node.names[0]}")
                scope[node.names[0]] = value
        elif node.kind == "break":
            raise _Break
        elif node.kind == "continue":
            raise _Continue
        elif node.kind in ("if", "with"):
            value = _pipe(node.pipe, dot, scopes)
            scope = dict(zip(node.names, [value])) if node.names else {}
            branch = node.body if truthy(value) else node.otherwise
            inner = value if node.kind == "with" and truthy(value) else dot
            _run(branch, inner, scopes + [scope], out, stop_after)
        else:
            _range(node, dot, scopes, out, stop_after)


def _range(node, dot, scopes, out, stop_after):
    value = _pipe(node.pipe, dot, scopes)
    pairs = sorted(value.items()) if isinstance(value, dict) else \
        list(enumerate(value)) if isinstance(value, (list, tuple)) else \
        enumerate(range(value)) if type(value) is int else None         # lazily: any size
    if pairs is None and value is not None:
        raise GoTemplateError(f"range cannot walk a {type(value).__name__}")
    if not pairs or type(value) is int and value <= 0:
        _run(node.otherwise, dot, scopes + [{}], out, stop_after)
        return
    for key, item in pairs:
        out.budget.tick()
        names = node.names
        scope = {names[0]: item} if len(names) == 1 else \
            dict(zip(names, (key, item))) if names else {}
        try:
            _run(node.body, item, scopes + [scope], out, stop_after)
        except _Break:
            break
        except _Continue:
            continue


def _mentions(pipe, name: str) -> bool:
    return any(op[0] == "field" and name in op[1].split(".") for command in pipe
               for op in command)


def _pipe(pipe, dot, scopes):
    value, first = None, True
    for command in pipe:
        args = None if first else [value]
        value = _command(command, dot, scopes, args)
        first = False
    return value


CONSTANTS = {"true": True, "false": False, "nil": None}


def _command(command, dot, scopes, extra):
    head = command[0]
    if head[0] == "ident" and head[1] not in CONSTANTS:
        args = [_operand(op, dot, scopes) for op in command[1:]] + (extra or [])
        return _call(head[1], args)
    if len(command) > 1 or extra:
        raise GoTemplateError("a value cannot take arguments")
    return _operand(head, dot, scopes)


def _call(name: str, args: list):
    if name not in FUNCTIONS:
        raise GoTemplateError(f'function "{name}" not defined')
    try:
        value = FUNCTIONS[name](*args)
    except (TypeError, IndexError, KeyError, ValueError, ArithmeticError) as error:
        raise GoTemplateError(f"error calling {name}: {error}") from None
    if isinstance(value, str) and len(value) > LONGEST:
        raise GoTemplateError(f"{name} made a value of more than {LONGEST} characters")
    return value


def _constant(kind: str, text: str):
    """A string or number constant's value (a GoTemplateError where Python cannot read it:
    an escape JSON does not know, a number of thousands of digits)."""
    try:
        if kind == "str":
            return json.loads(text) if text.startswith('"') else text[1:-1]
        return float(text) if "." in text else int(text)
    except ValueError as error:
        raise GoTemplateError(f"cannot read the constant {text[:20]!r}: {error}") from None


def _operand(op, dot, scopes):
    kind = op[0]
    if kind in ("str", "num"):
        return _constant(kind, op[1])
    if kind == "ident":
        return CONSTANTS[op[1]] if op[1] in CONSTANTS else _call(op[1], [])
    if kind == "field":
        return dot if op[1] == "." else _fields(dot, op[1])
    if kind == "var":
        name, _, path = op[1].partition(".")
        found = next((s[name] for s in reversed(scopes) if name in s), _MISSING)
        if found is _MISSING:
            raise GoTemplateError(f"undefined variable {name}")
        return _fields(found, "." + path) if path else found
    if kind == "pipe":
        return _pipe(op[1], dot, scopes)
    if kind == "chain":
        return _fields(_operand(op[1], dot, scopes), op[2])
    raise GoTemplateError(f"cannot evaluate {op!r}")


_MISSING = object()


def _fields(value, path: str):
    for name in path.strip(".").split("."):
        if isinstance(value, dict):
            value = value.get(name)
        elif value is None:
            return None
        else:
            raise GoTemplateError(f"can't evaluate field {name} in a {type(value).__name__}")
    return value


def truthy(value) -> bool:
    return bool(value) if value is not None else False


def go_json(value) -> str:
    """json.Marshal's text: compact, <, > and & escaped."""
    def plain(v):
        if isinstance(v, Struct):
            return plain(v.as_json)
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v
    text = json.dumps(plain(value), separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def go_string(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) < 1e21 else repr(value)
    if isinstance(value, (dict, list, tuple)):
        return go_json(value)
    return str(value)


def _compare(op):
    def check(a, b):
        try:
            return op(a, b)
        except TypeError:
            raise GoTemplateError(f"incompatible types for comparison: {a!r} and {b!r}") \
                from None
    return check


def _printf(form: str, *args) -> str:
    if WIDE_FORMAT.search(form) or re.search(r"%[-+ #0\d]*\.\d{7,}", form):
        raise GoTemplateError("printf's width or precision is above the limit")
    converted = re.sub(r"%[vsdq]", lambda m: "%r" if m.group() == "%q" else "%s", form)
    return converted % tuple(json.dumps(a) if isinstance(a, str) and "%q" in form
                             else go_string(a) for a in args)


FUNCTIONS = {
    "and": lambda *a: next((x for x in a if not truthy(x)), a[-1]),
    "or": lambda *a: next((x for x in a if truthy(x)), a[-1]),
    "not": lambda a: not truthy(a),
    "eq": lambda a, *b: any(_compare(lambda x, y: x == y)(a, x) for x in b),
    "ne": _compare(lambda a, b: a != b),
    "lt": _compare(lambda a, b: a < b), "le": _compare(lambda a, b: a <= b),
    "gt": _compare(lambda a, b: a > b), "ge": _compare(lambda a, b: a >= b),
    "len": lambda a: len(a or ()),
    "index": lambda a, *keys: _index(a, keys),
    "slice": lambda a, *bounds: a[bounds[0]:bounds[1] if len(bounds) > 1 else None]
    if bounds else a,
    "print": lambda *a: " ".join(go_string(x) for x in a),
    "println": lambda *a: " ".join(go_string(x) for x in a) + "\n",
    "printf": _printf,
    "json": go_json,
    "currentDate": lambda *_: datetime.date.today().isoformat(),
    "yesterdayDate": lambda *_: (datetime.date.today() - datetime.timedelta(1)).isoformat(),
}


def _index(value, keys):
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else value[key]
    return value
