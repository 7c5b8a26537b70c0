"""Qwen3-VL's prompt as Ollama renders it in code (model/renderers/qwen3vl.go): ChatML turns,
tools as JSON lines (Go's JSON with a space after ':' and ','), calls as JSON objects in
<tool_call>, the current turn's thinking in <think>. "qwen3-vl-instruct" does not think
unless asked, "qwen3-vl-thinking" does unless told not to. Images are not written here: the
server has put their [img-N] tags in the messages' content already."""

from __future__ import annotations

from .go import calls, marshal, think_bool, thinking, tool, with_spaces

TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query."
              "\n\nYou are provided with function signatures within <tools></tools> XML tags:"
              "\n<tools>")
TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name "
              "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
              '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
              "<|im_end|>\n")


def _render(messages: list[dict], tools: list | None, think, default_thinking: bool) -> str:
    thinks = default_thinking if think is None else think_bool(think)
    first_system = bool(messages) and messages[0].get("role") == "system"
    out = []
    if tools:
        out.append("<|im_start|>system\n" +
                   (messages[0].get("content", "") + "\n\n" if first_system else "") +
                   TOOLS_HEAD + "".join("\n" + with_spaces(marshal(tool(t))) for t in tools) +
                   TOOLS_TAIL)
    elif first_system:
        out.append(f"<|im_start|>system\n{messages[0].get('content') or ''}<|im_end|>\n")
    last_query = len(messages) - 1
    for i in range(len(messages) - 1, -1, -1):
        content = messages[i].get("content") or ""
        if messages[i].get("role") == "user" and not (
                content.startswith("<tool_response>") and content.endswith("</tool_response>")):
            last_query = i
            break
    for i, message in enumerate(messages):
        role, content = message.get("role", ""), message.get("content") or ""
        last = i == len(messages) - 1
        prefill = last and role == "assistant"
        if role == "user" or (role == "system" and i != 0):
            out.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
        elif role == "assistant":
            reasoning = thinking(message) if thinks else ""
            if thinks and i > last_query and (last or reasoning):
                out.append(f"<|im_start|>{role}\n<think>\n" + reasoning.strip("\n"))
                if content:
                    out.append("\n</think>\n\n" + content.lstrip("\n"))
            else:
                out.append(f"<|im_start|>{role}\n{content}")
            for j, (name, arguments, _) in enumerate(calls(message)):
                if j > 0 or content:
                    out.append("\n")
                out.append(f'<tool_call>\n{{"name": "{name}", "arguments": '
                           f"{with_spaces(marshal(arguments))}}}\n</tool_call>")
            if not prefill:
                out.append("<|im_end|>\n")
        elif role == "tool":
            if i == 0 or messages[i - 1].get("role") != "tool":
                out.append("<|im_start|>user")
            out.append(f"\n<tool_response>\n{content}\n</tool_response>")
            if last or messages[i + 1].get("role") != "tool":
                out.append("<|im_end|>\n")
        if last and not prefill:
            out.append("<|im_start|>assistant\n" + ("<think>\n" if thinks else ""))
    return "".join(out)


def render_qwen3_vl_instruct(messages: list[dict], tools: list | None = None,
                             think=None) -> str:
    return _render(messages, tools, think, default_thinking=False)


def render_qwen3_vl_thinking(messages: list[dict], tools: list | None = None,
                             think=None) -> str:
    return _render(messages, tools, think, default_thinking=True)
