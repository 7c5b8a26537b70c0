"""Poolside Laguna's prompts as Ollama renders them in code (model/renderers/laguna.go):
"laguna" (LagunaRenderer, the v2 template: each tag on a line of its own) and "poolside-v1"
(LagunaV8Renderer, the v8 template: tags inline). Both start with 〈|EOS|〉, seed Poolside's
system text when the first message is not a system one (an empty first system message
leaves the header out), list tools as JSON lines in <available_tools>, write calls as
<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>, and open the reply with
<think> when think is on, else </think> (thinking is off unless asked for)."""

from __future__ import annotations

from .go import calls, marshal, think_bool, thinking, tool, with_spaces

BOS = "〈|EOS|〉"
DEFAULT_SYSTEM = ("You are a helpful, conversationally-fluent assistant made by Poolside. You "
                  "are here to be helpful to users through natural language conversations.")
TOOLS_HEAD = ("### Tools\n\nYou may call functions to assist with the user query.\nAll "
              "available function signatures are listed below:\n<available_tools>\n")
CALL_FORMAT = ("For each function call, return an unescaped XML-like object with function "
               "name and arguments within '<tool_call>' and '</tool_call>' tags, like here:\n")
THINK_FORMAT = ("Wrap your thinking in '<think>', '</think>' tags, followed by a function call. "
                + CALL_FORMAT + "<think> your thoughts here </think>\n")
CALL_EXAMPLE = ("<tool_call>function-name\n<arg_key>argument-key</arg_key>\n<arg_value>"
                "value-of-argument-key</arg_value>\n</tool_call>")


def _rstrip(text: str) -> str:
    """strings.TrimRightFunc(text, unicode.IsSpace) (Python's isspace also takes \\x1c-\\x1f)."""
    end = len(text)
    while end and text[end - 1].isspace() and text[end - 1] not in "\x1c\x1d\x1e\x1f":
        end -= 1
    return text[:end]


def _argument(value) -> str:
    """formatLagunaToolCallArgument: a string as is, anything else as JSON with spaces."""
    return value if isinstance(value, str) else with_spaces(marshal(value))


def _tool_lines(tools: list) -> str:
    return "".join(with_spaces(marshal(tool(spec))) + "\n" for spec in tools)


def _split(content: str, reasoning: str) -> tuple[str, str]:
    """lagunaV2AssistantContent: a </think> in the content splits the reasoning off it."""
    parts = content.split("</think>")
    if len(parts) == 1:
        return content, reasoning
    if not reasoning:
        before = parts[0].rstrip("\n")
        opened = before.rfind("<think>")
        if opened >= 0:
            before = before[opened + len("<think>"):]
        reasoning = before.lstrip("\n")
    return parts[-1].lstrip("\n"), reasoning


def _header(messages: list[dict]) -> tuple[str, list[dict]]:
    if messages and messages[0].get("role") == "system":
        return messages[0].get("content") or "", messages[1:]
    return DEFAULT_SYSTEM, messages


def render_laguna(messages: list[dict], tools: list | None = None, think=None) -> str:
    thinking_on = think is not None and think_bool(think)
    system, rest = _header(messages)
    out = [BOS]
    if system.strip() or tools:
        out.append("<system>\n" + ("\n" + _rstrip(system) if system.strip() else ""))
        if tools:
            out.append("\n\n" + TOOLS_HEAD + _tool_lines(tools) + "</available_tools>\n\n" +
                       (THINK_FORMAT if thinking_on else CALL_FORMAT) + CALL_EXAMPLE)
        out.append("\n</system>\n")
    for i, message in enumerate(rest):
        role, content = message.get("role"), message.get("content") or ""
        if role in ("user", "system"):
            out.append(f"<{role}>\n{content}\n</{role}>\n")
        elif role == "tool":
            out.append(f"<tool_response>\n{content}\n</tool_response>\n")
        elif role == "assistant":
            content, reasoning = _split(content, thinking(message))
            found = calls(message)
            prefill = i == len(rest) - 1 and bool(content.strip() or reasoning.strip() or found)
            out.append("<assistant>\n" + (f"<think>\n{reasoning.strip()}\n</think>\n"
                                          if reasoning.strip() else "</think>\n"))
            if content.strip():
                out.append(content.strip() + "\n")
            for name, arguments, _ in found:
                out.append(f"<tool_call>{name}\n" + "".join(
                    f"<arg_key>{key}</arg_key>\n<arg_value>{_argument(value)}</arg_value>\n"
                    for key, value in arguments.items()) + "</tool_call>\n")
            if not prefill:
                out.append("</assistant>\n")
    if not messages or messages[-1].get("role") != "assistant":
        out.append("<assistant>\n" + ("<think>" if thinking_on else "</think>"))
    return "".join(out)


def render_poolside_v1(messages: list[dict], tools: list | None = None, think=None) -> str:
    thinking_on = think is not None and think_bool(think)
    system, rest = _header(messages)
    out = [BOS]
    has_system = bool(system.strip())
    if has_system or tools or thinking_on:
        out.append("<system>")
        if has_system:
            out.append(_rstrip(system) + ("\n\n" if tools else ""))
        if tools:
            out.append(TOOLS_HEAD + _tool_lines(tools) + "</available_tools>")
        out.append("</system>\n")
    for message in rest:
        role, content = message.get("role"), message.get("content") or ""
        if role in ("user", "system"):
            out.append(f"<{role}>{content}</{role}>\n")
        elif role == "tool":
            out.append(f"<tool_response>{content}</tool_response>\n")
        elif role == "assistant":
            out.append("<assistant>" + (f"<think>{thinking(message)}</think>"
                                        if thinking_on else "</think>") + content)
            for name, arguments, _ in calls(message):
                out.append(f"<tool_call>{name}" + "".join(
                    f"<arg_key>{key}</arg_key><arg_value>{_argument(value)}</arg_value>"
                    for key, value in arguments.items()) + "</tool_call>")
            out.append("</assistant>\n")
    out.append("<assistant>" + ("<think>" if thinking_on else "</think>"))
    return "".join(out)
