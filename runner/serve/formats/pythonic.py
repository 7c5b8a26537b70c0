"""The families that write calls as Python: LFM2 and LFM2.5, between <|tool_call_start|>
and <|tool_call_end|>: [get_weather(location='Paris', days=2), now()]; OLMo 3, a call a
line between <function_calls> and </function_calls>. Read with Python's own parser,
literals only (nothing is evaluated)."""

from __future__ import annotations

import ast
import json

from .format import Format, register
from .grammar import compact


JSON_NAMES = {"true": True, "false": False, "null": None}    # OLMo 3 writes JSON's literals


def _literal(node: ast.expr):
    if isinstance(node, ast.Name) and node.id in JSON_NAMES:
        return JSON_NAMES[node.id]
    return ast.literal_eval(node)


def python_calls(body: str) -> list[tuple[str, dict]] | None:
    """[NAME(KEY=literal, ...), ...] (or one call without the brackets) -> the calls."""
    try:
        tree = ast.parse(body.strip(), mode="eval").body
        items = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
    except SyntaxError:                           # OLMo 3's: a call a line
        try:
            items = [ast.parse(line.strip(), mode="eval").body
                     for line in body.splitlines() if line.strip()]
        except SyntaxError:
            return None
    calls = []
    for item in items:
        if not isinstance(item, ast.Call) or item.args or \
                not isinstance(item.func, (ast.Name, ast.Attribute)):
            return None
        try:
            arguments = {k.arg: _literal(k.value) for k in item.keywords}
        except ValueError:
            return None
        if None in arguments:                       # **kwargs
            return None
        calls.append((ast.unparse(item.func), arguments))
    return calls or None


def python_call_grammar(opening: str, closing: str):
    """A forced call's grammar in Python's syntax: NAME(KEY=value, ...) with each required
    parameter's value as JSON of its schema (JSON's strings, numbers, lists and objects are
    Python's too, and its true, false and null are read back), between opening and
    closing."""
    def grammar(name: str, schema: dict, text) -> str:
        required = set(schema.get("required") or [])
        parts = [text(f"{opening}{name}(")]
        for at, (parameter, spec) in enumerate(
                (p, s) for p, s in (schema.get("properties") or {}).items() if p in required):
            parts += [text(f"{', ' if at else ''}{parameter}="),
                      "%json " + json.dumps(compact(spec if isinstance(spec, dict) else {}))]
        return " ".join(parts + [text(f"){closing}")])
    return grammar


LFM2 = register(Format(
    "lfm2", lambda t: "<|tool_call_start|>" in t, think=("<think>", "</think>"),
    tool=("<|tool_call_start|>", "<|tool_call_end|>"), parse_call=python_calls,
    call_grammar=python_call_grammar("<|tool_call_start|>[", "]<|tool_call_end|>")), rank=25)
OLMO3 = register(Format(
    "olmo3", lambda t: "<function_calls>" in t, think=("<think>", "</think>"),
    tool=("<function_calls>", "</function_calls>"), parse_call=python_calls,
    call_grammar=python_call_grammar("<function_calls>", "</function_calls>")), rank=25)
