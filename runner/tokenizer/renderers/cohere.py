"""Cohere North / Command A 2026's prompt as Ollama renders it in code ("cohere":
model/renderers/cohere.go): a platform system turn (the first system message, then an
Available Tools section written even with no tools), <|START_TEXT|>-wrapped turns, thinking
in <|START_THINKING|>, calls as a JSON list in <|START_ACTION|> with ids renumbered from 0
across the conversation, consecutive tool results in one <|START_TOOL_RESULT|> list, and
the reply opened with <|START_THINKING|> (closed at once when think is off). Go's renderer
leaves <BOS_TOKEN> to the tokenizer (its LeadingBOS), so the prompt here starts without it."""

from __future__ import annotations

from .go import calls, function, marshal, think_bool, with_spaces

TURN = "<|START_OF_TURN_TOKEN|>"
END_TURN = "<|END_OF_TURN_TOKEN|>"
SYSTEM = TURN + "<|SYSTEM_TOKEN|>"


def _tools(tools: list) -> str:
    out = ["# Available Tools\n```json\n[\n" + ("" if tools else "\n\n")]
    for i, spec in enumerate(tools):
        fn = function(spec)
        out.append(f'\n    {{"name": {marshal(fn["name"])}, "description": '
                   f'{marshal(fn.get("description") or "")}, '
                   f'"parameters": {with_spaces(marshal(fn["parameters"]))}, '
                   '"responses": null}' + ("," if i < len(tools) - 1 else "") + "\n\n")
    out.append("\n]\n```")
    return "".join(out)


def _result(call_id: str, content: str) -> str:
    return ('\n    {\n        "tool_call_id": "' + call_id + '",\n        "results": {\n\n'
            '            \n            "0": ' + with_spaces(marshal({"content": content})) +
            '\n\n        },\n        "is_error": null\n    }')


def _thinking(message: dict) -> str:
    said = message.get("thinking") or ""
    return f"<|START_THINKING|>{said}<|END_THINKING|>" if said else ""


def render_cohere(messages: list[dict], tools: list | None = None, think=None) -> str:
    reasoning = think is None or think_bool(think)
    system, rest = "", messages
    if messages and (messages[0].get("role") or "").lower() == "system":
        system, rest = messages[0].get("content") or "", messages[1:]
    out = [SYSTEM + "<|START_TEXT|>" + (system + "\n\n\n\n" if system else "") +
           _tools(tools or []) + "<|END_TEXT|>" + END_TURN]
    count, indices = 0, dict[str, str]()           # a call's id -> its index

    def next_id(call_id: str) -> str:
        nonlocal count
        index = str(count)
        count += 1
        if call_id:
            indices.setdefault(call_id, index)
        return index

    def result_id(message: dict) -> str:
        call_id = message.get("tool_call_id") or ""
        return indices.get(call_id, call_id)

    prefill, i = False, 0
    while i < len(rest):
        message = rest[i]
        role, content = (message.get("role") or "").lower(), message.get("content") or ""
        if role in ("system", "user"):
            token = "<|SYSTEM_TOKEN|>" if role == "system" else "<|USER_TOKEN|>"
            out.append(f"{TURN}{token}<|START_TEXT|>{content}<|END_TEXT|>{END_TURN}")
        elif role in ("assistant", "chatbot"):
            out.append(TURN + "<|CHATBOT_TOKEN|>")
            found = calls(message)
            if found:
                out.append("\n            \n                " + _thinking(message) +
                           "<|START_ACTION|>[")
                for j, (name, arguments, call_id) in enumerate(found):
                    out.append(f'\n\n    {{"tool_call_id": "{next_id(call_id)}", "tool_name": '
                               f'"{name}", "parameters": {with_spaces(marshal(arguments))}}}' +
                               ("," if j < len(found) - 1 else ""))
                out.append("\n\n]<|END_ACTION|>" + END_TURN)
            else:
                out.append(_thinking(message) + "<|START_TEXT|>" + content)
                if i == len(rest) - 1:
                    prefill = True
                else:
                    out.append("<|END_TEXT|>" + END_TURN)
        elif role == "tool":
            out.append(SYSTEM + "<|START_TOOL_RESULT|>[" + _result(result_id(message), content))
            while i + 1 < len(rest) and (rest[i + 1].get("role") or "").lower() == "tool":
                i += 1
                out.append("," + _result(result_id(rest[i]), rest[i].get("content") or ""))
            out.append("\n\n]<|END_TOOL_RESULT|>" + END_TURN)
        i += 1
    if not prefill:
        out.append(TURN + "<|CHATBOT_TOKEN|><|START_THINKING|>" +
                   ("" if reasoning else "<|END_THINKING|>"))
    return "".join(out)
