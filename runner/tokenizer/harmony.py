"""OpenAI's harmony format (gpt-oss) rendered from messages, for files that carry no chat
template of their own (Ollama's gpt-oss files render it in code too).

The text is what gpt-oss's own chat template writes (tests/runner/tokenizer/test_harmony.py
renders a table of conversations with both): a system message (identity, knowledge cutoff,
date, reasoning effort, the channels), a developer message with the instructions and the
tools as TypeScript declarations in the `functions` namespace, then the turns. An
assistant turn that calls a tool keeps its reasoning (analysis) unless a final answer
follows it; earlier turns' reasoning is dropped; a tool's result goes back from
`functions.NAME` (the last call's name) as a JSON string. Unlike the template, which
writes the first call of a message only, every call is written (as Ollama does).
"""

from __future__ import annotations

import datetime
import json

from .messages import check_messages

IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
CUTOFF = "2024-06"
CHANNELS = "# Valid channels: analysis, commentary, final. Channel must be included for " \
    "every message."
TOOL_CHANNEL = "\nCalls to these tools must go to the commentary channel: 'functions'."
EFFORTS = ("low", "medium", "high")
NESTED_INDENT = "\n" + " " * 16       # what the template leaves before a nested property's type
SCALARS = {"string": "string", "number": "number", "integer": "number", "boolean": "boolean"}


def to_json(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def typescript(spec: dict) -> str:
    """A JSON schema as the template writes it in TypeScript."""
    kind = spec.get("type")
    if kind == "array":
        items = spec.get("items")
        if not items:
            text = "any[]"
        elif items.get("type") in SCALARS:
            text = SCALARS[items["type"]] + "[]"
        else:
            inner = typescript(items)
            text = "any[]" if inner == "object | object" or len(inner) > 50 else inner + "[]"
        return text + (" | null" if spec.get("nullable") else "")
    if isinstance(kind, list) and kind:
        return " | ".join(kind)
    if spec.get("oneOf"):
        return _one_of(spec["oneOf"])
    if kind == "string":
        if spec.get("enum"):
            return '"' + '" | "'.join(spec["enum"]) + '"'
        return "string" + (" | null" if spec.get("nullable") else "")
    if kind in SCALARS:
        return SCALARS[kind]
    if kind == "object":
        properties = spec.get("properties")
        if not properties:
            return "object"
        required = spec.get("required") or []
        fields = [f"{name}{'' if name in required else '?'}: {NESTED_INDENT}{typescript(inner)}"
                  for name, inner in properties.items()]
        return "{\n" + ", ".join(fields) + "}"
    return "any"


def _one_of(variants: list) -> str:
    """The variants one after the other (the template means to write `any` for a union with
    objects, but its flag is set inside a loop, where Jinja keeps it: it never is)."""
    parts = []
    for variant in variants:
        text = typescript(variant)
        if variant.get("description"):
            text += "// " + variant["description"]
        if "default" in variant:
            text += " " * 20 + "// default: " + to_json(variant["default"])
        parts.append(text)
    return " | \n".join(parts)


def namespace(tools: list) -> str:
    """The tools as the `functions` namespace of TypeScript types."""
    text = "## functions\n\nnamespace functions {\n\n"
    for tool in tools:
        function = tool.get("function", tool)
        text += f"// {function.get('description', '')}\ntype {function['name']} = "
        parameters = function.get("parameters") or {}
        properties = parameters.get("properties")
        if not properties:
            text += "() => any;\n\n"
            continue
        text += "(_: {\n"
        required = parameters.get("required") or []
        for name, spec in properties.items():
            if spec.get("description"):
                text += f"// {spec['description']}\n"
            text += f"{name}{'' if name in required else '?'}: {typescript(spec)}"
            if "default" in spec:
                default = spec["default"]
                text += f", // default: {default}" if spec.get("enum") else \
                    f"// default: {default}" if spec.get("oneOf") else \
                    f", // default: {to_json(default)}"
            text += ",\n"
        text += "}) => any;\n\n"
    return text + "} // namespace functions"


def system_message(reasoning: str, tools: bool, today: datetime.date) -> str:
    return (f"<|start|>system<|message|>{IDENTITY}\nKnowledge cutoff: {CUTOFF}\n"
            f"Current date: {today.isoformat()}\n\nReasoning: {reasoning}\n\n{CHANNELS}"
            f"{TOOL_CHANNEL if tools else ''}<|end|>")


def render(messages: list[dict], tools: list | None = None, reasoning_effort: str = "medium",
           add_generation_prompt: bool = True, today: datetime.date | None = None) -> str:
    """The harmony prompt of messages (the first one may be system or developer: the
    instructions); reasoning_effort: low, medium or high."""
    check_messages(messages)
    if reasoning_effort not in EFFORTS:
        raise ValueError(f"Harmony's reasoning effort is low, medium or high, not "
                         f"{reasoning_effort!r}.")
    text = system_message(reasoning_effort, bool(tools), today or datetime.date.today())
    instructions = ""
    if messages and messages[0].get("role") in ("system", "developer"):
        instructions, messages = messages[0].get("content") or "", messages[1:]
    if instructions or tools:
        text += "<|start|>developer<|message|>"
        text += f"# Instructions\n\n{instructions}\n\n" if instructions else ""
        text += "# Tools\n\n" + namespace(tools) if tools else ""
        text += "<|end|>"
    last_call = None
    for index, message in enumerate(messages):
        role, content = message.get("role"), message.get("content") or ""
        if role == "user":
            text += f"<|start|>user<|message|>{content}<|end|>"
        elif role == "tool":
            if last_call is None:
                raise ValueError("A tool message needs an earlier assistant message that "
                                 "called a tool.")
            text += (f"<|start|>functions.{last_call} to=assistant<|channel|>commentary"
                     f"<|message|>{to_json(content)}<|end|>")
        elif role == "assistant" and message.get("tool_calls"):
            text += _calls(message, answered=any(
                m.get("role") == "assistant" and not m.get("tool_calls")
                for m in messages[index + 1:]))
            last_call = _function(message["tool_calls"][-1])["name"]
        elif role == "assistant":
            thinking = message.get("thinking")
            if index == len(messages) - 1 and not add_generation_prompt:
                if thinking is not None:
                    text += f"<|start|>assistant<|channel|>analysis<|message|>{thinking}<|end|>"
                text += f"<|start|>assistant<|channel|>final<|message|>{content}<|return|>"
            else:                               # earlier turns' reasoning is dropped
                text += f"<|start|>assistant<|channel|>final<|message|>{content}<|end|>"
                last_call = None
    return text + ("<|start|>assistant" if add_generation_prompt else "")


def _function(call: dict) -> dict:
    return call.get("function", call)


def _calls(message: dict, answered: bool) -> str:
    """An assistant message's tool calls, after its reasoning unless answered (a final
    message follows)."""
    reasoning = message.get("content") or ""
    if reasoning and message.get("thinking"):
        raise ValueError("An assistant message with tool calls takes its reasoning in content "
                         "or in thinking, not both.")
    reasoning = reasoning or message.get("thinking") or ""
    text = "" if answered or not reasoning else \
        f"<|start|>assistant<|channel|>analysis<|message|>{reasoning}<|end|>"
    for call in message["tool_calls"]:
        function = _function(call)
        text += (f"<|start|>assistant to=functions.{function['name']}<|channel|>commentary "
                 f"json<|message|>{to_json(function.get('arguments', {}))}<|call|>")
    return text
