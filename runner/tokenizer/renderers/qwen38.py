"""Qwen 3.8's prompt as Ollama renders it in code ("qwen3.8": model/renderers/qwen35.go's
Qwen35Renderer, variant qwen35Renderer38): Qwen 3.5's ChatML with every assistant turn's
think block kept, system and developer messages folded into one leading system turn, a
reasoning-effort line written into it (xhigh when think is unset or high/max, low's when
low, none for true, medium or false), thinking taken from the message only (never pulled
out of <think> tags in the content), and other roles written as turns of their own."""

from __future__ import annotations

from .go import think_bool, thinking, tool, marshal, with_spaces
from .qwen import CALL_FORMAT, END, START, _is_tool_response, tool_response, xml_calls

XHIGH = ("Reasoning effort is set to xhigh. Please think carefully through the task, "
         "validate key assumptions, consider plausible alternatives, and prioritize "
         "correctness, consistency, and clarity in the final answer.")
LOW = ("Reasoning effort is set to low. Keep your thinking brief and focused, moving "
       "directly to the conclusion without unnecessary elaboration.")


def _instructions(think) -> str:
    """qwen38ReasoningInstructions."""
    if think is None:
        return XHIGH
    if not think_bool(think):
        return ""
    if think is True or think == "medium":
        return ""
    return LOW if think == "low" else XHIGH


def _normalize(messages: list[dict]) -> list[dict]:
    """normalizeQwen38Messages: system and developer messages as one leading system turn."""
    instructions = [m for m in messages if m.get("role") in ("system", "developer")]
    if not instructions or (len(instructions) == 1 and messages[0].get("role") == "system"):
        return messages
    texts = [(m.get("content") or "").strip() for m in instructions]
    return [{"role": "system", "content": "\n\n".join(t for t in texts if t)}] + \
        [m for m in messages if m.get("role") not in ("system", "developer")]


def render_qwen38(messages: list[dict], tools: list | None = None, think=None) -> str:
    messages = _normalize(messages)
    if not messages:
        raise ValueError("no messages provided")
    if not any(m.get("role") == "user" and not _is_tool_response(m) for m in messages):
        raise ValueError("no user query found in messages")
    thinking_on = True if think is None else think_bool(think)
    reasoning = _instructions(think)
    first_system = messages[0].get("role") == "system"
    system = (messages[0].get("content") or "").strip() if first_system else ""
    out = []
    if tools:
        out.append(f"{START}system\n" + (reasoning + "\n\n" if reasoning else "") +
                   "# Tools\n\nYou have access to the following functions:\n\n<tools>")
        out += ["\n" + with_spaces(marshal(tool(spec))) for spec in tools]
        out.append("\n</tools>\n\n" + CALL_FORMAT + ("\n\n" + system if system else "") +
                   END + "\n")
    elif system or reasoning:
        out.append(f"{START}system\n{reasoning}" + ("\n\n" if reasoning and system else "") +
                   system + END + "\n")
    for i, message in enumerate(messages):
        role, content = message.get("role", ""), (message.get("content") or "").strip()
        last = i == len(messages) - 1
        prefill = last and role == "assistant"
        if role == "user" or (role == "system" and i != 0):
            out.append(f"{START}{role}\n{content}{END}\n")
        elif role == "assistant":
            out.append(f"{START}assistant\n<think>\n{thinking(message).strip()}\n</think>\n\n"
                       + content)
            out += xml_calls(message, content)
            if not prefill:
                out.append(END + "\n")
        elif role == "tool":
            out += tool_response(messages, i, content)
        elif role != "system":
            out.append(f"{START}{role}\n{content}{END}\n")
        if last and not prefill:
            out.append(f"{START}assistant\n" +
                       ("<think>\n" if thinking_on else "<think>\n\n</think>\n\n"))
    return "".join(out)
