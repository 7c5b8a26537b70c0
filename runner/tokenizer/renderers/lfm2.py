"""LFM2's prompt as Ollama renders it in code (model/renderers/lfm2.go): <|startoftext|>,
ChatML turns, tools as a JSON list (Python's spacing, HTML not escaped) between
<|tool_list_start|> and <|tool_list_end|> in the system turn, calls as a pythonic list
between <|tool_call_start|> and <|tool_call_end|>, results in <|tool_response_start|>. The
thinking variant writes an assistant's thinking back as <think>...</think>; earlier turns'
thinking is dropped unless thinking is on."""

from __future__ import annotations

from .go import calls, function, marshal, think_bool, thinking, tool, with_spaces

BOS = "<|startoftext|>"
CALL_START, CALL_END = "<|tool_call_start|>", "<|tool_call_end|>"
RESPONSE_START, RESPONSE_END = "<|tool_response_start|>", "<|tool_response_end|>"


def _json(value) -> str:
    """lfm2JSON: Go's encoder without HTML escapes, a space after ':' and ','."""
    return with_spaces(marshal(value, escape_html=False))


def _schema(spec: dict):
    """A tool as LFM2's templates take it: the function object (the whole tool when it has
    no name)."""
    described = function(spec)
    return described if described["name"] else tool(spec)


def _calls(message: dict) -> str:
    return CALL_START + "[" + ",".join(
        name + "(" + ",".join(f"{key}={_json(arguments[key])}" for key in sorted(arguments)) +
        ")" for name, arguments, _ in calls(message)) + "]" + CALL_END


def _render(messages: list[dict], tools: list | None, think, is_thinking: bool) -> str:
    out = [BOS]
    system, start = "", 0
    if messages and messages[0].get("role") == "system":
        system, start = messages[0].get("content") or "", 1
    if tools:
        system += ("\n" if system else "") + "List of tools: <|tool_list_start|>[" + \
            ", ".join(_json(_schema(spec)) for spec in tools) + "]<|tool_list_end|>"
    if system:
        out.append(f"<|im_start|>system\n{system}<|im_end|>\n")
    keep_past = is_thinking and think is not None and think_bool(think)
    last_assistant = max((i for i in range(start, len(messages))
                          if messages[i].get("role") == "assistant"), default=-1)
    for i in range(start, len(messages)):
        message = messages[i]
        role, content = message.get("role", ""), message.get("content") or ""
        prefill = i == len(messages) - 1 and role == "assistant"
        out.append(f"<|im_start|>{role}\n")
        if role == "assistant" and message.get("tool_calls") and CALL_START not in content:
            content = _calls(message) + ("" if not content.strip() else "\n") + content
        reasoning = thinking(message)
        if is_thinking and role == "assistant" and reasoning and "</think>" not in content:
            content = f"<think>{reasoning}</think>{content}"
        if role == "assistant" and not keep_past and i != last_assistant:
            found = content.rfind("</think>")
            if found >= 0:
                content = content[found + len("</think>"):].strip()
        if role == "tool" and RESPONSE_START not in content:
            content = RESPONSE_START + content + RESPONSE_END
        out.append(content + ("" if prefill else "<|im_end|>\n"))
    if not (messages and messages[-1].get("role") == "assistant"):
        out.append("<|im_start|>assistant\n")
    return "".join(out)


def render_lfm2(messages: list[dict], tools: list | None = None, think=None) -> str:
    return _render(messages, tools, think, is_thinking=False)


def render_lfm2_thinking(messages: list[dict], tools: list | None = None,
                         think=None) -> str:
    return _render(messages, tools, think, is_thinking=True)
