"""FunctionGemma's prompt as Ollama renders it in code ("functiongemma": model/renderers/
functiongemma.go): <bos>, a developer turn (the first system or developer message, then
"You can do function calling..." and each tool as a <start_function_declaration>), Gemma's
<start_of_turn> turns, calls as call:NAME{key:value} with keys sorted and strings wrapped
in <escape>, and each tool result as response:NAME{...} right after the calls, the name
taken from the call it answers; think is not read."""

from __future__ import annotations

from .go import Ordered, calls, value_text

DEFAULT_SYSTEM = "You can do function calling with the following functions:"


def _value(value) -> str:
    """formatArgValue: strings escaped, whole numbers as integers, maps with sorted keys."""
    if isinstance(value, str):
        return f"<escape>{value}<escape>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value == int(value) and abs(value) < 2 ** 63:
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_value(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_value(v) for v in value) + "]"
    return value_text(value)


def _declaration(spec: dict) -> str:
    fn = spec.get("function") or {}
    params = fn.get("parameters") or {}
    out = [f"<start_function_declaration>declaration:{fn.get('name') or ''}{{description:"
           f"<escape>{fn.get('description') or ''}<escape>"]
    props, kind = params.get("properties"), params.get("type") or ""
    if props is not None or kind:
        parts = []
        if props:
            entries = []
            for name in sorted(props):
                prop = props[name] or {}
                types = prop.get("type")
                types = [types] if isinstance(types, str) else list(types or [])
                entries.append(f"{name}:{{description:<escape>{prop.get('description') or ''}"
                               "<escape>" + (f",type:<escape>{types[0].upper()}<escape>"
                                             if types else "") + "}")
            parts.append("properties:{" + ",".join(entries) + "}")
        if params.get("required"):
            parts.append("required:[" + ",".join(f"<escape>{r}<escape>"
                                                 for r in params["required"]) + "]")
        if kind:
            parts.append(f"type:<escape>{kind.upper()}<escape>")
        out.append(",parameters:{" + ",".join(parts) + "}")
    out.append("}<end_function_declaration>")
    return "".join(out)


def _call(name: str, arguments: Ordered) -> str:
    return (f"<start_function_call>call:{name}{{" +
            ",".join(f"{k}:{_value(arguments[k])}" for k in sorted(arguments)) +
            "}<end_function_call>")


def render_functiongemma(messages: list[dict], tools: list | None = None, think=None) -> str:
    out = ["<bos>"]
    system, rest = "", messages
    if messages and messages[0].get("role") in ("system", "developer"):
        system, rest = messages[0].get("content") or "", messages[1:]
    if system or tools:
        out.append("<start_of_turn>developer\n" + system.strip())
        if tools:
            out.append(("\n" if system else "") +
                       (DEFAULT_SYSTEM if system.strip() != DEFAULT_SYSTEM else ""))
        out += [_declaration(spec) for spec in tools or []]
        out.append("<end_of_turn>\n")
    previous = ""                        # "tool_call" or "tool_response": what came last
    for i, message in enumerate(rest):
        role, content = message.get("role") or "", message.get("content") or ""
        if role == "assistant":
            if previous != "tool_response":
                out.append("<start_of_turn>model\n")
            previous = ""
            out.append(content.strip())
            found = calls(message)
            out += [_call(name, arguments) for name, arguments, _ in found]
            if found and i + 1 < len(rest) and rest[i + 1].get("role") == "tool":
                out.append("<start_function_response>")
                previous = "tool_call"
            else:
                out.append("<end_of_turn>\n")
        elif role == "user":
            if previous != "tool_response":
                out.append("<start_of_turn>user\n")
            previous = ""
            out.append(content.strip() + "<end_of_turn>\n")
        elif role == "tool":
            name = ""
            for j in range(i - 1, -1, -1):
                asked = calls(rest[j]) if rest[j].get("role") == "assistant" else []
                if asked:
                    index = sum(1 for k in range(j + 1, i) if rest[k].get("role") == "tool")
                    name = asked[index][0] if index < len(asked) else ""
                    break
            if previous != "tool_call":
                out.append("<start_function_response>")
            out.append(f"response:{name}{{{_value(content)}}}<end_function_response>")
            previous = "tool_response"
        else:
            out.append(f"<start_of_turn>{role}\n{content.strip()}<end_of_turn>\n")
    if previous != "tool_response":
        out.append("<start_of_turn>model\n")
    return "".join(out)
