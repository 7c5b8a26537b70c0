"""OLMo 3's prompts as Ollama renders them in code (model/renderers/olmo3.go, olmo3_think.go):
ChatML turns, a default system text when the chat has none, tools as a JSON list inside
<functions>, calls as pythonic NAME(key=JSON, ...) in <function_calls>, tool results in an
"environment" turn. The Think variants take no tools and open the reply with <think>."""

from __future__ import annotations

from .go import calls, marshal, tool, with_spaces

OLMO3_SYSTEM = "You are a helpful function-calling AI assistant. "
OLMO31_SYSTEM = "You are Olmo, a helpful AI assistant built by Ai2. Your date cutoff is " \
    "December 2024, and your model weights are available at https://huggingface.co/allenai. "
NO_FUNCTIONS = "You do not currently have access to any functions. "
WITH_FUNCTIONS = (
    "You are provided with function signatures within <functions></functions> XML tags. You "
    "may call one or more functions to assist with the user query. Output any function calls "
    "within <function_calls></function_calls> XML tags. Do not make assumptions about what "
    "values to plug into functions.")
THINK_32B_SYSTEM = "You are a helpful AI assistant."
THINK_SUFFIX = " You do not currently have access to any functions. <functions></functions>"


def _split_system(messages: list[dict]) -> tuple[dict | None, list[dict]]:
    """The first system message, and the others but system messages."""
    systems = [m for m in messages if m.get("role") == "system"]
    return (systems[0] if systems else None), [m for m in messages if m.get("role") != "system"]


def _olmo3(messages: list[dict], tools: list | None, extended: bool) -> str:
    system, turns = _split_system(messages)
    functions = with_spaces(marshal([tool(spec) for spec in tools])) if tools else ""
    out = ["<|im_start|>system\n"]
    if system is not None:
        out.append((system.get("content") or "") +
                   (f"<functions>{functions}</functions>" if tools else ""))
    else:
        out.append(OLMO31_SYSTEM if extended else OLMO3_SYSTEM)
        out.append(f"{WITH_FUNCTIONS}<functions>{functions}</functions>" if tools else
                   NO_FUNCTIONS + "<functions></functions>")
    out.append("<|im_end|>\n")
    for i, message in enumerate(turns):
        role, content = message.get("role"), message.get("content") or ""
        if role == "user":
            out.append(f"<|im_start|>user\n{content}<|im_end|>\n")
        elif role == "assistant":
            found = calls(message)
            out.append("<|im_start|>assistant\n" + content)
            if found:
                out.append("<function_calls>" + "\n".join(
                    name + "(" + ", ".join(f"{key}={marshal(arguments[key])}"
                                           for key in sorted(arguments)) + ")"
                    for name, arguments, _ in found) + "</function_calls>")
            if i != len(turns) - 1 or found:
                out.append("<|im_end|>\n")
        elif role == "tool":
            out.append(f"<|im_start|>environment\n{content}<|im_end|>\n")
    last = turns[-1] if turns else None
    if not (last and last.get("role") == "assistant" and not last.get("tool_calls") and
            last.get("content")):
        out.append("<|im_start|>assistant\n")
    return "".join(out)


def render_olmo3(messages: list[dict], tools: list | None = None, think=None) -> str:
    return _olmo3(messages, tools, extended=False)


def render_olmo31(messages: list[dict], tools: list | None = None, think=None) -> str:
    return _olmo3(messages, tools, extended=True)


def _olmo3_think(messages: list[dict], default_system: str) -> str:
    system, turns = _split_system(messages)
    out = ["<|im_start|>system\n" +
           ((system.get("content") or "") + THINK_SUFFIX if system is not None
            else default_system) + "<|im_end|>\n"]
    for message in turns:
        if message.get("role") in ("user", "assistant"):
            out.append(f"<|im_start|>{message['role']}\n{message.get('content') or ''}"
                       "<|im_end|>\n")
    out.append("<|im_start|>assistant\n<think>")
    return "".join(out)


def render_olmo3_think(messages: list[dict], tools: list | None = None, think=None) -> str:
    """"olmo3-think": Olmo-3-7B-Think and Olmo-3.1-32B-Think."""
    return _olmo3_think(messages, OLMO31_SYSTEM.rstrip())


def render_olmo3_32b_think(messages: list[dict], tools: list | None = None,
                           think=None) -> str:
    return _olmo3_think(messages, THINK_32B_SYSTEM)
