"""What Ollama hands its Go templates (template/template.go's Execute), from a chat's
messages: a template that reads .Messages gets the system messages joined as .System and
the others collated (consecutive messages of one role joined by a blank line, tool results
kept apart), with .Tools; an older one that does not is executed once per turn with
.System, .Prompt and .Response, the last turn cut after .Response."""

from __future__ import annotations

from .gotemplate import Budget, GoTemplateError, Struct, execute, parse


def render_go(template: str, messages: list[dict], tools: list | None = None,
              think: bool | None = None, think_level: str | None = None) -> str:
    """The prompt; GoTemplateError (a ValueError) naming what failed."""
    try:
        return _render(template, messages, tools, think, think_level)
    except GoTemplateError as error:
        raise GoTemplateError(f"The model's Go template failed: {error}.") from None


def _render(template: str, messages: list[dict], tools: list | None, think: bool | None,
            think_level: str | None) -> str:
    nodes, budget = parse(template), Budget()             # one budget for every turn
    common = {"Think": bool(think), "ThinkLevel": think_level or "",
              "IsThinkSet": think is not None, "Response": ""}
    system = "\n\n".join(m.get("content") or "" for m in messages if m.get("role") == "system")
    if "Messages" in template:
        turns = [_message(m) for m in _collated(messages)]
        return execute(nodes, {**common, "System": system, "Messages": turns,
                               "Tools": [_tool(t) for t in tools] if tools else None}, None,
                       budget)
    out, turn = [], {"System": "", "Prompt": "", "Response": ""}
    for message in _collated(messages):
        role, content = message.get("role", ""), message.get("content") or ""
        if role == "system" and (turn["Prompt"] or turn["Response"]) or \
                role == "user" and turn["Response"]:
            out.append(execute(nodes, {**common, **turn}, None, budget))
            turn = {"System": "", "Prompt": "", "Response": ""}
        key = {"system": "System", "user": "Prompt", "assistant": "Response"}.get(role)
        if key:
            turn[key] = content
    out.append(execute(nodes, {**common, **turn}, "Response", budget))
    return "".join(out)


def _collated(messages: list[dict]) -> list[dict]:
    collated: list[dict] = []
    for message in messages:
        role = message.get("role")
        if collated and collated[-1]["role"] == role and role != "tool":
            previous = collated[-1]
            collated[-1] = dict(previous, content=(previous.get("content") or "") + "\n\n" +
                                (message.get("content") or ""))
        else:
            collated.append(dict(message))
    return collated


def _message(m: dict) -> Struct:
    calls = [Struct({"ID": call.get("id", ""), "Function": Struct({
        "Index": i, "Name": call["function"]["name"],
        "Arguments": Struct(dict(call["function"].get("arguments") or {}),
                            call["function"].get("arguments") or {})},
        call["function"])}, call) for i, call in enumerate(m.get("tool_calls") or [])]
    fields = {"Role": m.get("role", ""), "Content": m.get("content") or "",
              "Thinking": m.get("thinking") or "", "Images": m.get("images") or [],
              "ToolCalls": calls, "ToolName": m.get("tool_name") or m.get("name") or "",
              "ToolCallID": m.get("tool_call_id") or ""}
    return Struct(fields, fields)


def _tool(tool: dict) -> Struct:
    """A tool as Ollama's templateTool: fields by Go name, printed as its JSON (Go's field
    order, properties by name)."""
    function = tool.get("function") or {}
    parameters = function.get("parameters") or {}
    properties = {name: Struct({"Type": p.get("type"), "Description": p.get("description", ""),
                                "Enum": p.get("enum"), "Items": p.get("items")}, p)
                  for name, p in sorted((parameters.get("properties") or {}).items())}
    parameters_json = {"type": parameters.get("type", "object"),
                       **({"required": parameters["required"]}
                          if parameters.get("required") else {}),
                       "properties": {k: v.as_json for k, v in properties.items()}}
    function_json = {"name": function.get("name", ""),
                     "description": function.get("description", ""),
                     "parameters": parameters_json}
    return Struct({"Type": tool.get("type", "function"), "Function": Struct({
        "Name": function_json["name"], "Description": function_json["description"],
        "Parameters": Struct({"Type": parameters_json["type"],
                              "Required": parameters.get("required") or [],
                              "Properties": Struct(properties, parameters_json["properties"])},
                             parameters_json)}, function_json)},
        {"type": tool.get("type", "function"), "function": function_json})
