"""DeepSeek V3.1's and Cogito's prompts as Ollama renders them in code (model/renderers/
deepseek3.go, cogito.go): DeepSeek's full-width tokens, tools described in the system text,
calls between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>. Thinking only when the request
asks for it (Ollama's "model supports it AND user requests it")."""

from __future__ import annotations

import json

from .go import Ordered, calls, marshal, parameters, think_bool, thinking, tool

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
OUTPUT_BEGIN, OUTPUT_END = "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"
USAGE = (
    "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
    f"{CALLS_BEGIN}{CALL_BEGIN}tool_call_name{SEP}tool_call_arguments{CALL_END}"
    "{{additional_tool_calls}}" f"{CALLS_END}\n\n"
    "Where:\n\n- `tool_call_name` must be an exact match to one of the available tools\n"
    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters "
    "Schema\n- For multiple tool calls, chain them directly without separators or spaces\n")
COGITO = "You are Cogito, an AI assistant created by Deep Cogito, which is an AI research " \
    "lab based in San Francisco."


def render_deepseek31(messages: list[dict], tools: list | None = None, think=None) -> str:
    """DeepSeek3Renderer, variant 3.1."""
    on = think is not None and think_bool(think)
    systems = [m.get("content") or "" for m in messages if m.get("role") == "system"]
    out = [BOS, "\n\n".join(systems)]
    if tools:
        out.append("\n\n## Tools\nYou have access to the following tools:\n")
        for spec in tools:
            function = spec.get("function") or {}
            out.append(f"\n### {function.get('name') or ''}\nDescription: "
                       f"{function.get('description') or ''}\n\nParameters: "
                       f"{marshal(parameters(function.get('parameters') or {}))}\n")
        out.append(USAGE)
    after_tool, after_user = False, False
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content") or ""
        if role == "user":
            after_tool, after_user = False, True
            out.append("<｜User｜>" + content)
        elif role == "assistant" and message.get("tool_calls"):
            if after_user:
                out.append("<｜Assistant｜></think>")
            after_tool = after_user = False
            out.append(content + CALLS_BEGIN)
            out += [f"{CALL_BEGIN}{name}{SEP}{marshal(arguments)}{CALL_END}"
                    for name, arguments, _ in calls(message)]
            out.append(CALLS_END + EOS)
        elif role == "assistant":
            if after_user:
                opened = thinking(message) and on and i > last_user
                out.append("<｜Assistant｜>" + ("<think>" if opened else "</think>"))
            after_user = False
            if after_tool:
                after_tool = False
            elif "</think>" in content:
                content = content.split("</think>", 1)[1]
            out.append(content + EOS)
        elif role == "tool":
            after_user, after_tool = False, True
            out.append(OUTPUT_BEGIN + content + OUTPUT_END)
    if after_user and not after_tool:
        out.append("<｜Assistant｜>" + ("<think>" if on else "</think>"))
    return "".join(out)


def _indented(value, depth: int = 0) -> str:
    """Go's json.MarshalIndent(v, "", "    ")."""
    text = marshal(value)
    parsed = json.loads(text, object_pairs_hook=Ordered)
    return _indent(parsed, depth)


def _indent(value, depth: int) -> str:
    pad, inner = "    " * depth, "    " * (depth + 1)
    if isinstance(value, dict) and value:
        keys = list(value)
        return "{\n" + ",\n".join(f"{inner}{marshal(k)}: {_indent(value[k], depth + 1)}"
                                  for k in keys) + f"\n{pad}}}"
    if isinstance(value, list) and value:
        return "[\n" + ",\n".join(inner + _indent(v, depth + 1) for v in value) + f"\n{pad}]"
    return marshal(value)


def render_cogito(messages: list[dict], tools: list | None = None, think=None) -> str:
    """CogitoRenderer: a DeepSeek-shaped prompt, thinking switched on in the system text."""
    on = think is not None and think_bool(think)
    system = messages[0].get("content") or "" if messages and \
        messages[0].get("role") == "system" else ""
    turns = messages[1:] if messages and messages[0].get("role") == "system" else messages
    if on:
        prompt = "Enable deep thinking subroutine.\n\n" + COGITO + \
            (f"\n\n{system}\n\n" if system else "")
    else:
        prompt = COGITO + (f"\n\n{system}" if system else "")
    if tools:
        prompt += "\nYou have the following functions available:\n"
        prompt += "".join(f"```json\n{_indented(tool(spec))}\n```\n" for spec in tools)
    out = [BOS + prompt]
    outputs_open, after_user = False, False
    for i, message in enumerate(turns):
        role, content = message.get("role"), message.get("content") or ""
        if role == "user":
            after_user = True
            out.append(f"<｜User｜>{content}<｜Assistant｜>")
        elif role == "assistant":
            after_user = False
            if message.get("tool_calls"):
                out.append(content + CALLS_BEGIN + "\n".join(
                    f"{CALL_BEGIN}function{SEP}{name}\n```json\n{marshal(arguments)}\n```"
                    f"{CALL_END}" for name, arguments, _ in calls(message)) + CALLS_END + EOS)
            else:
                out.append(content + EOS)
        elif role == "tool":
            after_user = False
            if not outputs_open:
                out.append("<｜tool▁outputs▁begin｜>")
                outputs_open = True
            out.append(OUTPUT_BEGIN + content + OUTPUT_END)
            if i + 1 < len(turns) and turns[i + 1].get("role") == "tool":
                out.append("\n")
            else:
                out.append("<｜tool▁outputs▁end｜>")
                outputs_open = False
    if outputs_open:
        out.append("<｜tool▁outputs▁end｜>")
    if not after_user:
        out.append("<｜Assistant｜>")
    if on:
        out.append("<think>\n")
    return "".join(out)
