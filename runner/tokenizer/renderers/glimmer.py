"""Glimmer's prompt as Ollama renders it in code ("glimmer": model/renderers/glimmer.go):
<|begin_of_text|>, <|start|>HEADER<|message|>...<|eot|> segments, a system segment (the
default one names a knowledge cutoff and today's date) with a reasoning-strength line
(high by default, none when think is off, else the level) and the tools as JSON schemas
grouped by namespace, thinking as an "assistant to=self" segment, each call as an
"assistant to=NAME" segment holding an <atem:function_calls> block, results as
"tool NAME" segments, and the reply opened with <|start|>assistant."""

from __future__ import annotations

import datetime

from .go import calls, marshal, parameters, think_bool, thinking, value_text, with_spaces

BOS, START, MESSAGE, EOM, EOT = ("<|begin_of_text|>", "<|start|>", "<|message|>", "<|eom|>",
                                 "<|eot|>")
DEFAULT_SYSTEM = "You are a helpful AI assistant."
KNOWLEDGE_CUTOFF = "2026-01-04"
TOOLS_PREFIX = (
    "In this environment you have access to a set of tools you can use to answer the user's "
    "question.\n\nYou can invoke a function by writing a \"<atem:function_calls>\" block like "
    "the following:\n<atem:function_calls>\n<atem:invoke name=\"$FUNCTION_NAME\">\n"
    "<atem:parameter name=\"$PARAMETER_NAME\">$PARAMETER_VALUE</atem:parameter>\n...\n"
    "</atem:invoke>\n</atem:function_calls>\n\nString and scalar parameters should be "
    "specified as is, while lists and objects should use JSON format. Note that spaces for "
    "string values are not stripped. The output is not expected to be valid XML and is "
    "parsed with regular expressions.\nHere are the functions available in JSONSchema "
    "format:\n// Tool metadata\n")
TOOLS_SUFFIX = (
    "\n\nHere's an example of how to call a function in the tool set:\n(If the tool "
    "namespace is not specified, invoke the function directly as `example_function_name` "
    "rather than `example_tool_name.example_function_name`)\n\n"
    "to=example_tool_name.example_function_name\n\n<atem:function_calls>\n<atem:invoke "
    "name=\"example_tool_name.example_function_name\">\n<atem:parameter "
    "name=\"example_parameter_1\">value_1</atem:parameter>\n<atem:parameter "
    "name=\"example_parameter_2\">This is the value for the second parameter\nthat can span"
    "\n\"multiple\" lines\n</atem:parameter>\n</atem:invoke>\n</atem:function_calls>")
_REASONING = (("Reasoning effort", "Reasoning strength"), ("Reasoning Effort",
              "Reasoning Strength"), ("reasoning effort", "reasoning strength"),
              ("REASONING EFFORT", "REASONING STRENGTH"))


def _json(value) -> str:
    """glimmerJSON: Go's JSON without HTML escapes, a space after each ':' and ','."""
    return with_spaces(marshal(value, escape_html=False))


def _strength(think) -> str:
    if think is None:
        return "high"
    if not think_bool(think):
        return "none"
    return think if isinstance(think, str) else "high"


def _namespaces(tools: list) -> list[str]:
    found: list[str] = []
    for spec in tools:
        space = ((spec.get("function") or {}).get("name") or "").split(".", 1)[0]
        if space not in found:
            found.append(space)
    return found


def _normalize(content: str) -> str:
    """strings.NewReplacer's one pass: at each position the first pattern that matches."""
    out, i = [], 0
    while i < len(content):
        for old, new in _REASONING:
            if content.startswith(old, i):
                out.append(new)
                i += len(old)
                break
        else:
            out.append(content[i])
            i += 1
    return "".join(out)


def _system(content: str, tools: list, strength: str, date: str, default: bool) -> str:
    if not default:
        content = _normalize(content)
    out = [f"{START}system{MESSAGE}{content}"]
    if default:
        out.append(f"\nKnowledge cutoff: {KNOWLEDGE_CUTOFF}.\nCurrent date: {date}.")
    if default or "reasoning strength" not in content.lower():
        out.append(f"\n\nReasoning strength: {strength}.")
    if tools:
        out.append("\n\n" + TOOLS_PREFIX)
        out += [f'{{"name": {_json(space)}, "description": {_json("")}}}\n'
                for space in _namespaces(tools)]
        out.append("// Function schemas")
        for spec in tools:
            fn = spec.get("function") or {}
            out.append(f'\n{{"name": {_json(fn.get("name") or "")}, "description": '
                       f'{_json(fn.get("description") or "")}, "parameters": '
                       f'{_json(parameters(fn.get("parameters") or {}))}}}')
        out.append(TOOLS_SUFFIX)
    out.append('\n\n# Valid recipients: "self"' +
               "".join(f', "{space}.*"' for space in _namespaces(tools)) + ', "user".' + EOT)
    return "".join(out)


def _result_name(message: dict, messages: list[dict]) -> str:
    """glimmerToolResultName: the tool's name, else the name of the call it answers (the
    last call with its id), else the id."""
    if message.get("tool_name"):
        return message["tool_name"]
    name = call_id = message.get("tool_call_id") or ""
    if call_id:
        for candidate in messages:
            for called, _, found_id in calls(candidate):
                if found_id == call_id:
                    name = called
    return name


def _atem(name: str, arguments: dict) -> str:
    out = [f'<atem:function_calls>\n<atem:invoke name="{name}">\n']
    for key, value in arguments.items():
        text = "null" if value is None else _json(value) if isinstance(value, (dict, list)) \
            else value_text(value)
        out.append(f'<atem:parameter name="{key}">{text}</atem:parameter>\n')
    out.append("</atem:invoke>\n</atem:function_calls>")
    return "".join(out)


def render_glimmer(messages: list[dict], tools: list | None = None, think=None,
                   current_date: str | None = None) -> str:
    tools = tools or []
    strength = _strength(think)
    out = [BOS]
    if not any(m.get("role") == "system" for m in messages):
        date = current_date or datetime.date.today().isoformat()
        out.append(_system(DEFAULT_SYSTEM, tools, strength, date, True))
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content") or ""
        end = EOM if i + 1 < len(messages) and messages[i + 1].get("role") == role else EOT
        if role == "system":
            out.append(_system(content, tools, strength, "", False))
        elif role == "user":
            out.append(f"{START}user{MESSAGE}{content}{EOT}")
        elif role == "tool":
            name = _result_name(message, messages)
            out.append(f'{START}tool {name}{MESSAGE}<tool_output name="{name}">\n{content}\n'
                       f"</tool_output>{EOT}")
        elif role == "assistant":
            said = thinking(message)
            if said:
                out.append(f"{START}assistant to=self{MESSAGE}{said}{EOM}")
            found = calls(message)
            for j, (name, arguments, _) in enumerate(found):
                out.append(f"{START}assistant to={name}{MESSAGE}{_atem(name, arguments)}" +
                           (end if j + 1 == len(found) else EOM))
            if not found and (content or not said):
                out.append(f"{START}assistant to=user{MESSAGE}{content}{EOT}")
    out.append(START + "assistant")
    return "".join(out)
