"""Qwen3-Coder's and Qwen 3.5's prompts as Ollama renders them in code (model/renderers/
qwen3coder.go, qwen35.go): ChatML turns, tools declared in the system turn (Qwen3-Coder's as
XML, Qwen 3.5's as JSON lines), calls written as <function=NAME><parameter=KEY> blocks,
consecutive tool results in one user turn. Ollama's library ships these models with a
renderer name instead of a template, so a model pulled from it renders here."""

from __future__ import annotations

import json

from .go import Ordered, call_argument, calls, marshal, think_bool, thinking, tool, \
    value_text, with_spaces

START, END = "<|im_start|>", "<|im_end|>"
CODER_SYSTEM = "You are Qwen, a helpful AI assistant that can interact with a computer to " \
    "solve tasks."
CALL_FORMAT = (
    "If you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\n"
    "value_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the "
    "second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n"
    "</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call>"
    "</tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide "
    "optional reasoning for your function call in natural language BEFORE the function "
    "call, but NOT after\n- If there is no function call available, answer the question "
    "like normal with your current knowledge and do not tell the user about function "
    "calls\n</IMPORTANT>")


def _additional_keys(struct: Ordered, handled: set[str]) -> str:
    """renderAdditionalKeys: the struct's other JSON fields as <key>value</key> lines (Go
    walks a map here, in no fixed order; sorted keys stand in for it)."""
    out = []
    for key, value in sorted(json.loads(marshal(struct)).items()):
        if key in handled or value is None:
            continue
        text = marshal(value) if isinstance(value, (dict, list)) else value_text(value)
        out.append(f"\n<{key}>{text}</{key}>")
    return "".join(out)


def _definition_type(kind) -> str:
    kinds = [kind] if isinstance(kind, str) else list(kind or [])
    return kinds[0] if len(kinds) == 1 else marshal(kinds)


def _coder_tools(tools: list) -> str:
    out = ["\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>"]
    for spec in tools:
        function = tool(spec)["function"]
        out.append(f"\n<function>\n<name>{function['name']}</name>")
        if function.get("description"):
            out.append(f"\n<description>{function['description']}</description>")
        out.append("\n<parameters>")
        for name, prop in (function["parameters"]["properties"] or {}).items():
            out.append(f"\n<parameter>\n<name>{name}</name>")
            if prop.get("type"):
                out.append(f"\n<type>{_definition_type(prop['type'])}</type>")
            if prop.get("description"):
                out.append(f"\n<description>{prop['description']}</description>")
            out.append(_additional_keys(prop, {"type", "description"}))
            out.append("\n</parameter>")
        out.append(_additional_keys(function["parameters"], {"type", "properties"}))
        out.append("\n</parameters>\n</function>")
    out.append("\n</tools>\n\n" + CALL_FORMAT)
    return "".join(out)


def render_qwen3_coder(messages: list[dict], tools: list | None = None, think=None) -> str:
    """Qwen3CoderRenderer: the first system message wins, the others are dropped."""
    system, turns = "", []
    for message in messages:
        if message.get("role") != "system":
            turns.append(message)
        elif not system:
            system = message.get("content") or ""
    out = []
    if system or tools:
        out.append(f"{START}system\n{system or CODER_SYSTEM}")
        if tools:
            out.append(_coder_tools(tools))
        out.append(END + "\n")
    for i, message in enumerate(turns):
        role, content = message.get("role", ""), message.get("content") or ""
        last = i == len(turns) - 1
        prefill = last and role == "assistant"
        if role == "assistant" and message.get("tool_calls"):
            out.append(f"{START}assistant\n" + (content + "\n" if content else ""))
            for name, arguments, _ in calls(message):
                out.append(f"\n<tool_call>\n<function={name}>")
                out += [f"\n<parameter={key}>\n{call_argument(value)}\n</parameter>"
                        for key, value in arguments.items()]
                out.append("\n</function>\n</tool_call>")
            out.append(END + "\n")
        elif role == "assistant":
            out.append(f"{START}assistant\n{content}" + ("" if prefill else END + "\n"))
        elif role == "tool":
            if i == 0 or turns[i - 1].get("role") != "tool":
                out.append(f"{START}user")
            out.append(f"\n<tool_response>\n{content}\n</tool_response>")
            if last or turns[i + 1].get("role") != "tool":
                out.append(END + "\n")
        else:
            out.append(f"{START}{role}\n{content}{END}\n")
        if last and not prefill:
            out.append(f"{START}assistant\n")
    return "".join(out)


def xml_calls(message: dict, content: str) -> list[str]:
    """An assistant turn's calls after its content, as Qwen 3.5's renderer writes them."""
    out = []
    for j, (name, arguments, _) in enumerate(calls(message)):
        out.append(("\n\n" if content.strip() else "") if j == 0 else "\n")
        out.append(f"<tool_call>\n<function={name}>\n")
        out += [f"<parameter={key}>\n{call_argument(value)}\n</parameter>\n"
                for key, value in arguments.items()]
        out.append("</function>\n</tool_call>")
    return out


def tool_response(messages: list[dict], i: int, content: str) -> list[str]:
    """A tool result in the user's turn, which consecutive results share."""
    out = [f"{START}user"] if i == 0 or messages[i - 1].get("role") != "tool" else []
    out.append(f"\n<tool_response>\n{content}\n</tool_response>")
    if i == len(messages) - 1 or messages[i + 1].get("role") != "tool":
        out.append(END + "\n")
    return out


def _split_reasoning(content: str, reasoning: str, keep: bool) -> tuple[str, str]:
    """splitQwen35ReasoningContent: the message's thinking, else what a <think> block in
    its content holds (the content then what follows the block)."""
    if keep and reasoning:
        return reasoning.strip(), content
    found = content.find("</think>")
    if found != -1:
        before = content[:found]
        opened = before.rfind("<think>")
        reasoning = before[opened + len("<think>"):] if opened != -1 else before
        content = content[found + len("</think>"):].lstrip("\n")
    return (reasoning.strip() if found != -1 else ""), content


def _is_tool_response(message: dict) -> bool:
    content = (message.get("content") or "").strip()
    return content.startswith("<tool_response>") and content.endswith("</tool_response>")


def render_qwen35(messages: list[dict], tools: list | None = None, think=None,
                  always_think_block: bool = False) -> str:
    """Qwen35Renderer as Ollama registers "qwen3.5": thinking unless think is off, an
    empty think block when it is; always_think_block ("ornith"): every assistant turn keeps
    its think block, not only those after the last question."""
    thinking_on = True if think is None else think_bool(think)
    out = []
    first_system = bool(messages) and messages[0].get("role") == "system"
    if tools:
        out.append(f"{START}system\n# Tools\n\nYou have access to the following functions:"
                   "\n\n<tools>")
        out += ["\n" + with_spaces(marshal(tool(spec))) for spec in tools]
        out.append("\n</tools>\n\n" + CALL_FORMAT)
        system = (messages[0].get("content") or "").strip() if first_system else ""
        if system:
            out.append("\n\n" + system)
        out.append(END + "\n")
    elif first_system:
        out.append(f"{START}system\n{(messages[0].get('content') or '').strip()}{END}\n")
    last_query = len(messages) - 1
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user" and not _is_tool_response(messages[i]):
            last_query = i
            break
    for i, message in enumerate(messages):
        role, content = message.get("role", ""), (message.get("content") or "").strip()
        last = i == len(messages) - 1
        prefill = last and role == "assistant"
        if role == "user" or (role == "system" and i != 0):
            out.append(f"{START}{role}\n{content}{END}\n")
        elif role == "assistant":
            keep = always_think_block or (thinking_on and i > last_query)
            reasoning, content = _split_reasoning(content, thinking(message), keep)
            out.append(f"{START}assistant\n" +
                       (f"<think>\n{reasoning}\n</think>\n\n{content}" if keep else content))
            out += xml_calls(message, content)
            if not prefill:
                out.append(END + "\n")
        elif role == "tool":
            out += tool_response(messages, i, content)
        if last and not prefill:
            out.append(f"{START}assistant\n" +
                       ("<think>\n" if thinking_on else "<think>\n\n</think>\n\n"))
    return "".join(out)


def render_ornith(messages: list[dict], tools: list | None = None, think=None) -> str:
    """"ornith" (model/renderers/ornith.go): Qwen 3.5's, every think block kept."""
    return render_qwen35(messages, tools, think, always_think_block=True)
