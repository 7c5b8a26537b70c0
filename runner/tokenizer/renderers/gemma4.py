"""Gemma 4's prompt as Ollama renders it in code (model/renderers/gemma4.go): <bos>, <|turn>
and <turn|> markers, <|"|> around strings, tools declared in Gemma's own schema notation
(<|tool>declaration:NAME{...}<tool|>, types upper-cased, keys sorted), calls as
<|tool_call>call:NAME{key:value}<tool_call|> with the tool results folded into the model's
turn (<|tool_response>response:NAME{value:...}<tool_response|>), <|think|> in the system turn
when thinking is on. "gemma4-large" (12B and up) opens an empty thought block when it is
off. Ollama's "gemma4" is either, chosen by the model's size (entry.py)."""

from __future__ import annotations

from .go import Ordered, calls, think_bool, thinking, tool, value_text

Q = '<|"|>'                    # Gemma 4's string delimiter
STANDARD_KEYS = ("description", "type", "properties", "required", "nullable")


def _types(value) -> list[str]:
    """normalizeTypeNames: a type or list of types, upper-cased."""
    if isinstance(value, str):
        return [value.upper()]
    if isinstance(value, list):
        return [v.upper() for v in value if isinstance(v, str)]
    return []


def _strings(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _number(value) -> str:
    if isinstance(value, float) and value == int(value):
        return str(int(value))
    return str(value) if isinstance(value, int) else value_text(value)


def _arg(value) -> str:
    """formatArgValue: a call's argument or a tool's result in Gemma's notation."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return Q + value + Q
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_arg(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_arg(v) for v in value) + "]"
    return value_text(value)


def _schema_value(value) -> str:
    """formatSchemaValue: keys quoted, else as _arg."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{Q}{k}{Q}:{_schema_value(value[k])}"
                              for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_schema_value(v) for v in value) + "]"
    return _arg(value)


def _quoted_list(items: list) -> str:
    return "[" + ",".join(Q + str(v) + Q for v in items) + "]"


def _any_of_types(prop: dict) -> list[str]:
    """simpleAnyOfTypes: the types of an anyOf whose branches are bare types only."""
    found: list[str] = []
    for branch in prop.get("anyOf") or []:
        if set(branch) != {"type"} or not branch["type"]:
            return []
        for kind in [branch["type"]] if isinstance(branch["type"], str) else branch["type"]:
            if kind not in found:
                found.append(kind)
    return found


def _typed(prop: dict) -> dict:
    """topLevelTypedSchemaValueFromToolProperty: a declared property (api.ToolProperty's
    fields) as the schema map the declaration writes; several types as one odd string
    ("['STRING', 'NULL']"), as Gemma's template prints them."""
    out: dict = {}
    kinds = prop.get("type") or _any_of_types(prop)
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if kinds:
        out["type"] = kinds[0] if len(kinds) == 1 else \
            "[" + ", ".join(f"'{k.upper()}'" for k in kinds) + "]"
    for key in ("description", "enum", "items"):
        if prop.get(key) is not None:
            out[key] = prop[key]
    if prop.get("properties") is not None:
        out["properties"] = {k: _typed(v) for k, v in prop["properties"].items()}
    if prop.get("required"):
        out["required"] = prop["required"]
    return out


def _items_spec(items: dict) -> str:
    """writeSchemaItemsSpec: an array's items, keys sorted."""
    out = []
    for key in sorted(items):
        value = items[key]
        if value is None:
            continue
        if key == "properties":
            text = "properties:{" + (_properties(value) if isinstance(value, dict) else "") + "}"
        elif key == "required":
            text = "required:" + _quoted_list(_strings(value))
        elif key == "type":
            kinds = _types(value)
            text = "" if not kinds else f"type:{Q}{kinds[0]}{Q}" if len(kinds) == 1 else \
                "type:" + _quoted_list(kinds)
        else:
            text = f"{key}:{_schema_value(value)}"
        out.append(text)
    return ",".join(out)


def _properties(props: dict) -> str:
    """writeSchemaProperties: NAME:{description,enum|items,nullable,properties,required,
    type} for each property, names sorted (the schema's own keywords skipped)."""
    out = []
    for name in sorted(props):
        prop = props[name]
        if name in STANDARD_KEYS or not isinstance(prop, dict):
            continue
        parts = []
        if isinstance(prop.get("description"), str) and prop["description"]:
            parts.append(f"description:{Q}{prop['description']}{Q}")
        kinds = _types(prop.get("type"))
        kind = kinds[0] if kinds else ""
        enum = prop.get("enum")
        if kind == "STRING" and isinstance(enum, list) and enum:
            parts.append("enum:" + _quoted_list([value_text(v) for v in enum]))
        items = prop.get("items")
        if kind == "ARRAY" and isinstance(items, dict) and items:
            parts.append("items:{" + _items_spec(items) + "}")
        if prop.get("nullable") is True:
            parts.append("nullable:true")
        if kind == "OBJECT":
            nested = prop.get("properties")
            parts.append("properties:{" + _properties(nested if isinstance(nested, dict)
                                                      else prop) + "}")
            required = _strings(prop.get("required"))
            if required:
                parts.append("required:" + _quoted_list(required))
        if kinds:
            parts.append(f"type:{Q}{kinds[0]}{Q}" if len(kinds) == 1 else
                         "type:" + _quoted_list(kinds))
        out.append(f"{name}:{{" + ",".join(parts) + "}")
    return ",".join(out)


def _declaration(spec: dict) -> str:
    function = tool(spec)["function"]
    parameters = function["parameters"]
    out = f"<|tool>declaration:{function['name']}{{description:{Q}" \
          f"{function.get('description', '')}{Q}"
    props: Ordered | None = parameters["properties"]
    if props is not None or parameters["type"]:
        parts = []
        if props:
            parts.append("properties:{" + _properties({k: _typed(v)
                                                       for k, v in props.items()}) + "}")
        if parameters.get("required"):
            parts.append("required:" + _quoted_list(parameters["required"]))
        if parameters["type"]:
            parts.append(f"type:{Q}{parameters['type'].upper()}{Q}")
        out += ",parameters:{" + ",".join(parts) + "}"
    return out + "}<tool|>"


def _strip_thinking(text: str) -> str:
    """The content without <|channel>...<channel|> blocks (an unclosed one drops the rest)."""
    out = []
    while True:
        start = text.find("<|channel>")
        if start == -1:
            out.append(text)
            break
        out.append(text[:start])
        end = text.find("<channel|>", start)
        if end == -1:
            break
        text = text[end + len("<channel|>"):]
    return "".join(out).strip()


def _response_name(message: dict, made: list) -> str:
    name = message.get("tool_name") or message.get("name") or "unknown"
    wanted = message.get("tool_call_id")
    if wanted:
        name = next((called for called, _, ident in made if ident == wanted), name)
    return name


def _render(messages: list[dict], tools: list | None, think, large: bool) -> str:
    out = ["<bos>"]
    has_system = bool(messages) and messages[0].get("role") in ("system", "developer")
    turns = messages[1:] if has_system else messages
    thinks = think is not None and think_bool(think)
    if has_system or tools or thinks:
        out.append("<|turn>system\n" + ("<|think|>\n" if thinks else ""))
        if has_system:
            out.append((messages[0].get("content") or "").strip())
        out += [_declaration(spec) for spec in tools or []]
        out.append("<turn|>\n")
    last_user = max((i for i, m in enumerate(turns) if m.get("role") == "user"), default=-1)
    previous_kind, previous_role = "", ""
    for i, message in enumerate(turns):
        role = message.get("role", "")
        if role == "tool":
            continue
        previous_kind = ""
        turn_role = "model" if role == "assistant" else role
        if not (turn_role == "model" and previous_role == "assistant"):
            out.append(f"<|turn>{turn_role}\n")
        reasoning = thinking(message)
        if role == "assistant" and reasoning and i > last_user:
            out.append(f"<|channel>thought\n{reasoning}\n<channel|>")
        made = calls(message)
        for name, arguments, _ in made:
            out.append(f"<|tool_call>call:{name}{{" + ",".join(
                f"{key}:{_arg(arguments[key])}" for key in sorted(arguments)) + "}<tool_call|>")
            previous_kind = "tool_call"
        answered = False
        if made:
            k = i + 1
            while k < len(turns) and turns[k].get("role") == "tool":
                out.append(f"<|tool_response>response:{_response_name(turns[k], made)}"
                           f"{{value:{_arg(turns[k].get('content') or '')}}}<tool_response|>")
                answered, previous_kind = True, "tool_response"
                k += 1
        content = message.get("content") or ""
        if turn_role == "model":
            content = _strip_thinking(content) if content else ""
        else:
            content = content.strip()
        out.append(content)
        had_content = content.strip() != ""
        following = next((m.get("role", "") for m in turns[i + 1:]
                          if m.get("role") != "tool"), "")
        continues = turn_role == "model" and following == "assistant" and \
            (not made or answered)
        if previous_kind == "tool_call" and not answered:
            out.append("<|tool_response>")
        elif not continues and not (answered and not had_content and following == ""):
            out.append("<turn|>\n")
        previous_role = role
    if previous_kind not in ("tool_response", "tool_call"):
        out.append("<|turn>model\n" + ("<|channel>thought\n<channel|>" if large and not thinks
                                       else ""))
    elif previous_kind == "tool_response" and thinks:
        out.append("<|channel>thought\n")
    return "".join(out)


def render_gemma4(messages: list[dict], tools: list | None = None, think=None) -> str:
    """"gemma4-small" (E2B, E4B), and "gemma4" where the model's size is not known."""
    return _render(messages, tools, think, large=False)


def render_gemma4_large(messages: list[dict], tools: list | None = None,
                        think=None) -> str:
    return _render(messages, tools, think, large=True)
