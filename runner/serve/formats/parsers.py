"""Ollama's parser names (a pulled model's config blob: "parser", model/parsers/parsers.go's
ParserForName) as this server's reply formats, in one table.

Ollama names the code that reads a family's replies instead of inferring it from a template;
a model pulled from its library with a renderer and no template has nothing else to tell its
format by. Each name maps to the registered Format that reads the same replies, and to
what Ollama's parser says it supports (HasToolSupport, HasThinkingSupport), which is what
`show` reports as the tools and thinking capabilities. A name without a Format here (its
replies are read as plain text) is one whose syntax no format of this server reads yet."""

from __future__ import annotations

from typing import NamedTuple

from .format import FORMATS, Format


class Parser(NamedTuple):
    format: str | None        # a registered Format's name; None: plain text
    tools: bool               # Ollama's HasToolSupport
    thinking: bool            # Ollama's HasThinkingSupport


PARSERS: dict[str, Parser] = {
    "qwen3": Parser("qwen", True, False),
    "qwen3-thinking": Parser("qwen", True, True),
    "qwen3.5": Parser("qwen3coder", True, True),           # XML calls, <think>
    "ornith": Parser("qwen3coder", True, True),
    "qwen3-coder": Parser("qwen3coder", True, False),
    "qwen3-vl-instruct": Parser("qwen", True, False),
    "qwen3-vl-thinking": Parser("qwen", True, True),
    "nemotron-3-nano": Parser("qwen3coder", True, True),   # Qwen3-Coder's XML calls
    "nemotron-3.5-nano": Parser("qwen3coder", True, True),
    "ministral": Parser("mistral", True, False),
    "harmony": Parser("harmony", True, True),
    "deepseek3": Parser("deepseek3", True, True),
    "cogito": Parser("deepseek3", True, True),
    "glm-4.7": Parser("glm", True, True),
    "gemma4": Parser("gemma4", True, True),
    "gemma4-no-thinking": Parser("gemma4", True, False),
    "lfm2": Parser("lfm2", True, False),
    "lfm2-thinking": Parser("lfm2", True, True),
    "olmo3-think": Parser("qwen", False, True),            # <think> only, no tools
    "cohere": Parser("cohere", True, True),
    "olmo3": Parser("olmo3", True, False),         # Python calls in <function_calls>
    "laguna": Parser("glm", True, True),           # GLM's <arg_key>/<arg_value> calls
    "poolside-v1": Parser("glm", True, True),      # Laguna's, its prompts closed anew
    "glimmer": Parser("glimmer", True, True),
    "passthrough": Parser(None, False, False),
    # Ollama parses these; no format here reads their calls yet
    "functiongemma": Parser(None, False, False),
    "glm-ocr": Parser(None, False, False),
}


def parser_named(name: str | None) -> Parser | None:
    return PARSERS.get(name or "")


def format_of_parser(name: str | None) -> Format | None:
    """The reply format Ollama's parser name stands for; None for a name not in the table
    or one read as plain text."""
    parser = parser_named(name)
    if parser is None or parser.format is None:
        return None
    return next((f for f in FORMATS if f.name == parser.format), None)
