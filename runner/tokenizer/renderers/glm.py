"""GLM-4.7's prompt as Ollama renders it in code (model/renderers/glm47.go): [gMASK]<sop>,
tools as JSON lines in a system turn, calls as <tool_call>NAME<arg_key>K</arg_key><arg_value>V
</arg_value>, each assistant turn's thinking kept (<think>...</think>, else a bare </think>),
and the reply opened with <think> unless think is off."""

from __future__ import annotations

from .go import calls, marshal, think_bool, thinking, tool, with_spaces

TOOLS_HEAD = ("<|system|>\n# Tools\n\nYou may call one or more functions to assist with the "
              "user query.\n\nYou are provided with function signatures within <tools></tools>"
              " XML tags:\n<tools>\n")
TOOLS_TAIL = ("</tools>\n\nFor each function call, output the function name and arguments "
              "within the following XML format:\n<tool_call>{function-name}<arg_key>"
              "{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value><arg_key>{arg-key-2}"
              "</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>")


def render_glm47(messages: list[dict], tools: list | None = None, think=None) -> str:
    out = ["[gMASK]<sop>"]
    if tools:
        out.append(TOOLS_HEAD)
        out += [with_spaces(marshal(tool(spec))) + "\n" for spec in tools]
        out.append(TOOLS_TAIL)
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content") or ""
        if role == "user":
            out.append("<|user|>" + content)
        elif role == "assistant":
            reasoning = thinking(message)
            out.append("<|assistant|>" + (f"<think>{reasoning}</think>" if reasoning
                                          else "</think>") + content)
            for name, arguments, _ in calls(message):
                out.append("<tool_call>" + name + "".join(
                    f"<arg_key>{key}</arg_key><arg_value>"
                    f"{value if isinstance(value, str) else marshal(value)}</arg_value>"
                    for key, value in arguments.items()) + "</tool_call>")
        elif role == "tool":
            if i == 0 or messages[i - 1].get("role") != "tool":
                out.append("<|observation|>")
            out.append(f"<tool_response>{content}</tool_response>")
        elif role == "system":
            out.append("<|system|>" + content)
    off = think is not None and not think_bool(think)
    out.append("<|assistant|>" + ("</think>" if off else "<think>"))
    return "".join(out)


def render_glm_ocr(messages: list[dict], tools: list | None = None, think=None) -> str:
    """GLM-OCR's prompt ("glm-ocr": model/renderers/glmocr.go): GLM-4.7's tool block, each
    turn's tag on a line of its own, an assistant turn's thinking always in a think block
    (empty when it has none), and when think is given as off, each user turn ending with
    /nothink and the reply opened with an empty think block."""
    out = ["[gMASK]<sop>"]
    if tools:
        out.append(TOOLS_HEAD)
        out += [with_spaces(marshal(tool(spec))) + "\n" for spec in tools]
        out.append(TOOLS_TAIL)
    off = think is not None and not think_bool(think)
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content") or ""
        if role == "user":
            out.append("<|user|>\n" + content + ("/nothink" if off and not
                                                  content.endswith("/nothink") else ""))
        elif role == "assistant":
            out.append(f"<|assistant|>\n<think>{thinking(message).strip()}</think>" +
                       ("\n" + content.strip() if content else ""))
            for name, arguments, _ in calls(message):
                out.append("\n<tool_call>" + name + "".join(
                    f"<arg_key>{key}</arg_key><arg_value>"
                    f"{value if isinstance(value, str) else marshal(value)}</arg_value>"
                    for key, value in arguments.items()) + "</tool_call>")
            out.append("\n")
        elif role == "tool":
            if i == 0 or messages[i - 1].get("role") != "tool":
                out.append("<|observation|>")
            out.append(f"\n<tool_response>\n{content}\n</tool_response>\n")
        elif role == "system":
            out.append(f"<|system|>\n{content}\n")
    out.append("<|assistant|>\n" + ("<think></think>\n" if off else ""))
    return "".join(out)
