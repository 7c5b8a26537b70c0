"""Parsing Go's text/template (gotemplate.py runs it): a template's text and {{ actions }} into
a tree of Nodes, pipelines as lists of commands, each a list of operands."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
TOKEN = re.compile(r"""\s*(?:(?P<str>"(?:\\.|[^"\\])*"|`[^`]*`)
    |(?P<num>-?\d+(?:\.\d+)?)|(?P<var>\$\w*(?:\.\w+)*)|(?P<field>(?:\.\w+)+|\.)
    |(?P<op>:=|=|\||\(|\)|,)|(?P<ident>\w+))""", re.X)


class GoTemplateError(ValueError):
    pass


@dataclass
class Node:
    kind: str                          # text, print, if, range, with, break, continue, set
    text: str = ""
    pipe: list = field(default_factory=list)
    names: list = field(default_factory=list)           # declared or assigned variables
    declare: bool = True
    body: list = field(default_factory=list)
    otherwise: list = field(default_factory=list)


def parse(source: str) -> list[Node]:
    try:
        return _parse(source)
    except RecursionError:
        raise GoTemplateError("the template's blocks are nested too deeply") from None


def _parse(source: str) -> list[Node]:
    segments: list[tuple[str, str]] = []
    position = 0
    for match in ACTION.finditer(source):
        text = source[position:match.start()]
        if match.group(1):
            text = text.rstrip()
        if segments and segments[-1][0] == "trim":
            text = text.lstrip()
            segments.pop()
        segments.append(("text", text))
        inner = match.group(2).strip()
        if not inner.startswith("/*"):
            segments.append(("action", inner))
        if match.group(3):
            segments.append(("trim", ""))
        position = match.end()
    tail = source[position:]
    if "{{" in tail:
        raise GoTemplateError("an unclosed action (a {{ without its }})")
    if segments and segments[-1][0] == "trim":
        tail = tail.lstrip()
        segments.pop()
    segments.append(("text", tail))
    return _block(segments, 0, top=True)[0]


def _block(segments, i: int, top: bool = False, in_range: bool = False):
    """Nodes from segments[i] to the end of their block: (nodes, index after, stopper);
    in_range: inside a range's body, where break and continue may stand."""
    nodes = []
    while i < len(segments):
        kind, text = segments[i]
        i += 1
        if kind == "text":
            if text:
                nodes.append(Node("text", text))
            continue
        words = text.split(None, 1)
        head = words[0] if words else ""
        rest = words[1] if len(words) > 1 else ""
        if head in ("end", "else"):
            if top:
                raise GoTemplateError(f"unexpected {{{{{head}}}}} in the template")
            return nodes, (i, head, rest)
        if head in ("if", "range", "with"):
            node = _control(head, rest)
            node.body, (i, stop, after) = _block(segments, i,
                                                 in_range=in_range or head == "range")
            if stop == "else" and head == "if" and after.startswith("if "):
                nested = Node("if")
                nodes_else, i = _else_if(segments, i, after[3:], nested, in_range)
                node.otherwise = nodes_else
            elif stop == "else":             # a range's else runs outside its loop, as Go's
                node.otherwise, (i, stop, _) = _block(segments, i, in_range=in_range)
                if stop != "end":
                    raise GoTemplateError(f"{{{{{head}}}}} has two {{{{else}}}} branches")
            nodes.append(node)
        elif head in ("break", "continue"):
            if not in_range:
                raise GoTemplateError(f"{{{{{head}}}}} outside {{{{range}}}}")
            nodes.append(Node(head))
        else:
            names, declare, pipe = _assignment(text)
            nodes.append(Node("set" if names else "print", pipe=pipe, names=names,
                              declare=declare))
    if not top:
        raise GoTemplateError("the template ends inside a block (a missing {{end}})")
    return nodes, (i, None, "")


def _else_if(segments, i: int, condition: str, node: Node, in_range: bool):
    """An {{else if}} chain as a nested if; (its nodes, index after the chain's end)."""
    node.pipe = _pipeline(_tokens(condition))
    node.body, (i, stop, after) = _block(segments, i, in_range=in_range)
    if stop == "else" and after.startswith("if "):
        node.otherwise, i = _else_if(segments, i, after[3:], Node("if"), in_range)
    elif stop == "else":
        node.otherwise, (i, _, _) = _block(segments, i, in_range=in_range)
    return [node], i


def _control(head: str, rest: str) -> Node:
    names, declare, pipe = _assignment(rest)
    return Node(head, pipe=pipe, names=names, declare=declare)


def _assignment(text: str):
    tokens = _tokens(text)
    for op in (":=", "="):
        if ("op", op) in tokens:
            at = tokens.index(("op", op))
            names = [t[1] for t in tokens[:at] if t[0] == "var"]
            return names, op == ":=", _pipeline(tokens[at + 1:])
    return [], True, _pipeline(tokens)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = TOKEN.match(text, position)
        if not match or match.end() == position:
            raise GoTemplateError(f"cannot read {text[position:position + 20]!r} in an action")
        kind = match.lastgroup
        assert kind is not None        # every alternative in TOKEN is a named group
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


def _pipeline(tokens: list) -> list:
    """[command, ...]; a command is a list of operands (the first may be a function)."""
    commands, command, i = [], [], 0
    while i < len(tokens):
        kind, value = tokens[i]
        if (kind, value) == ("op", "("):
            end = _closing(tokens, i)
            operand: tuple[object, ...] = ("pipe", _pipeline(tokens[i + 1:end]))
            i = end + 1
            if i < len(tokens) and tokens[i][0] == "field" and tokens[i][1] != ".":
                operand = ("chain", operand, tokens[i][1])
                i += 1
            command.append(operand)
            continue
        if (kind, value) == ("op", "|"):
            commands.append(command)
            command = []
        elif kind != "op":
            command.append((kind, value))
        i += 1
    commands.append(command)
    if any(not c for c in commands):
        raise GoTemplateError("an empty command in a pipeline")
    return commands


def _closing(tokens, i: int) -> int:
    depth = 0
    for j in range(i, len(tokens)):
        if tokens[j] == ("op", "("):
            depth += 1
        elif tokens[j] == ("op", ")"):
            depth -= 1
            if depth == 0:
                return j
    raise GoTemplateError("an unclosed '(' in an action")
