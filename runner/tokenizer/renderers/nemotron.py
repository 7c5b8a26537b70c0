"""Nemotron 3 Nano's and Nemotron 3.5 Nano's prompts as Ollama renders them in code
("nemotron-3-nano", "nemotron-3.5-nano": model/renderers/nemotron3nano.go): ChatML with a
system turn always written, tools declared in Qwen3-Coder's XML (with Python-style JSON
for enums, schemas and lists), calls as <function=NAME><parameter=KEY> blocks, thinking
dropped from assistant turns before the last user message, consecutive tool results in one
user turn, and the reply opened with <think> (or an empty <think></think> when thinking is
off). Nemotron 3 reads /think and /no_think in user and system messages (and strips them);
3.5 leaves them as text, and marks the last user turn when think is "medium"."""

from __future__ import annotations

from .go import calls, marshal, think_bool, thinking, value_text
from .qwen import CALL_FORMAT


def _quote(text: str) -> str:
    """strconv.Quote: Go's escapes, printable characters as they are."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif char in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(char)])
        elif code < 0x20 or code == 0x7f:
            out.append(f"\\x{code:02x}")
        elif not char.isprintable() and char != " ":
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out) + '"'


def _json(value) -> str:
    """pythonJSON of a JSON value as Go holds it (maps with their keys sorted)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, (int, float)):
        return marshal(value)
    if isinstance(value, list):
        return "[" + ", ".join(_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_quote(str(k))}: {_json(value[k])}"
                               for k in sorted(value)) + "}"
    return marshal(value)


def _types(prop: dict) -> list[str]:
    kind = prop.get("type")
    return [kind] if isinstance(kind, str) else list(kind or [])


def _property_json(prop: dict) -> str:
    """pythonJSON of an api.ToolProperty: its fields in the struct's order."""
    parts = []
    if prop.get("anyOf"):
        parts.append('"anyOf": [' + ", ".join(_property_json(p) for p in prop["anyOf"]) + "]")
    types = _types(prop)
    if types:
        parts.append('"type": ' + (_json(types[0]) if len(types) == 1 else _json(types)))
    if prop.get("items") is not None:
        parts.append('"items": ' + _json(prop["items"]))
    if prop.get("description"):
        parts.append('"description": ' + _json(prop["description"]))
    if prop.get("enum"):
        parts.append('"enum": ' + _json(prop["enum"]))
    if prop.get("properties") is not None:
        parts.append('"properties": ' + _properties_json(prop["properties"]))
    if prop.get("required"):
        parts.append('"required": ' + _json(prop["required"]))
    return "{" + ", ".join(parts) + "}"


def _properties_json(props: dict) -> str:
    return "{" + ", ".join(f"{_quote(k)}: {_property_json(p or {})}"
                           for k, p in props.items()) + "}"


def _template_value(value) -> str:
    """templateValue: JSON for maps and lists, Python's str() for the rest."""
    if value is None:
        return "None"
    if isinstance(value, (dict, list)):
        return _json(value)
    if isinstance(value, bool):
        return "True" if value else "False"
    return value_text(value)


def _tools(tools: list) -> str:
    out = ["# Tools\n\nYou have access to the following functions:\n\n<tools>"]
    for spec in tools:
        fn = spec.get("function") or {}
        params = fn.get("parameters") or {}
        out.append(f"\n<function>\n<name>{fn.get('name') or ''}</name>")
        if fn.get("description"):
            out.append(f"\n<description>{fn['description'].strip()}</description>")
        out.append("\n<parameters>")
        for name, prop in (params.get("properties") or {}).items():
            prop = prop or {}
            out.append(f"\n<parameter>\n<name>{name}</name>")
            types = _types(prop)
            if types:
                out.append("\n<type>" + (types[0] if len(types) == 1 else
                                         "[" + ", ".join(f"'{t}'" for t in types) + "]") +
                           "</type>")
            if prop.get("description"):
                out.append(f"\n<description>{prop['description'].strip()}</description>")
            if prop.get("enum"):
                out.append(f"\n<enum>{_json(prop['enum'])}</enum>")
            if prop.get("anyOf"):
                out.append("\n<anyOf>[" + ", ".join(_property_json(p) for p in prop["anyOf"])
                           + "]</anyOf>")
            if prop.get("items") is not None:
                out.append(f"\n<items>{_json(prop['items'])}</items>")
            if prop.get("properties") is not None:
                out.append(f"\n<properties>{_properties_json(prop['properties'])}</properties>")
            if prop.get("required"):
                out.append(f"\n<required>{_json(prop['required'])}</required>")
            out.append("\n</parameter>")
        if params.get("$defs") is not None:
            out.append(f"\n<$defs>{_template_value(params['$defs'])}</$defs>")
        if params.get("items") is not None:
            out.append(f"\n<items>{_template_value(params['items'])}</items>")
        if params.get("required"):
            out.append(f"\n<required>{_json(params['required'])}</required>")
        out.append("\n</parameters>\n</function>")
    out.append("\n</tools>\n\n" + CALL_FORMAT)
    return "".join(out)


def _strip_toggles(text: str) -> str:
    """stripThinkToggles: /think and /no_think removed, a </think> kept."""
    text = text.replace("</think>", "<_end_think>").replace("/think", "")
    return text.replace("/no_think", "").replace("<_end_think>", "</think>")


def _assistant_content(message: dict, v35: bool) -> str:
    content, said = message.get("content") or "", thinking(message)
    if said:
        return f"<think>\n{said}</think>{content}" if v35 else \
            f"<think>\n{said}\n</think>\n{content}"
    if "<think>" not in content and "</think>" not in content:
        return "<think></think>" + content
    return content


def _call_content(content: str, truncate: bool) -> str:
    if not content.strip():
        return "<think></think>"
    if not truncate:
        return content.strip() + "\n"
    if "</think>" in content:
        content = content.split("</think>")[-1]
    elif "<think>" in content:
        content = content.split("<think>")[0]
    return ("<think></think>" + content.strip()).strip() + "\n"


def render_nemotron3_nano(messages: list[dict], tools: list | None = None, think=None,
                          v35: bool = False) -> str:
    on = think is None or think_bool(think)
    if not v35:
        for message in messages:
            if message.get("role") in ("user", "system"):
                content = message.get("content") or ""
                if "/think" in content.replace("</think>", ""):
                    on = True
                elif "/no_think" in content:
                    on = False
    medium = v35 and think == "medium"
    system, rest = "", messages
    if messages and messages[0].get("role") == "system":
        system = messages[0].get("content") or ""
        system, rest = (system if v35 else _strip_toggles(system)), messages[1:]
    last_user = max((i for i, m in enumerate(rest) if m.get("role") == "user"), default=-1)
    out = ["<|im_start|>system\n" + system]
    if tools:
        out.append(("\n\n" if system else "") + _tools(tools))
    out.append("<|im_end|>\n")
    for i, message in enumerate(rest):
        role, content = message.get("role") or "", message.get("content") or ""
        if role == "assistant":
            content, truncate = _assistant_content(message, v35), i < last_user
            found = calls(message)
            if found:
                out.append("<|im_start|>assistant\n" + _call_content(content, truncate))
                for name, arguments, _ in found:
                    out.append(f"<tool_call>\n<function={name}>\n" + "".join(
                        f"<parameter={key}>\n{_template_value(value)}\n</parameter>\n"
                        for key, value in arguments.items()) + "</function>\n</tool_call>\n")
            else:
                if truncate and "<think>" in content and "</think>" in content:
                    content = "<think></think>" + content.split("</think>")[-1]
                out.append("<|im_start|>assistant\n" + content.strip())
            out.append("<|im_end|>\n")
        elif role in ("user", "system"):
            if not v35:
                content = _strip_toggles(content).strip()
            elif role == "user" and i == last_user and medium:
                content += "\n\n{reasoning effort: efficient}"
            out.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
        elif role == "tool":
            if i > 0 and rest[i - 1].get("role") != "tool":
                out.append("<|im_start|>user\n")
            out.append(f"<tool_response>\n{content}\n</tool_response>\n")
            if not (i + 1 < len(rest) and rest[i + 1].get("role") == "tool"):
                out.append("<|im_end|>\n")
        else:
            out.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    out.append("<|im_start|>assistant\n" + ("<think>\n" if on else "<think></think>"))
    return "".join(out)


def render_nemotron35_nano(messages: list[dict], tools: list | None = None,
                           think=None) -> str:
    return render_nemotron3_nano(messages, tools, think, v35=True)
