"""The text a request sends to its runner: the chat template rendered over messages, tools
and the thinking switch (Hugging Face's semantics: tokenized without adding BOS again), or a
generate request's prompt with its system text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...tokenizer.go_values import render_go
from ...tokenizer.template import render, renderer_for
from .fim import fim_prompt, fim_tokens
from ..library.entry import Entry
from .format import FORMATS, Format, format_for
from .parsers import format_of_parser

# harmony's reasoning is low, medium or high: it cannot be turned off (the least there is:
# low), and Ollama takes "max" as high
HARMONY_EFFORT = {"off": "low", "max": "high"}


@dataclass
class Prompt:
    text: str
    format: Format                # how the reply writes thinking and tool calls
    start_thinking: bool = False  # the prompt opened a think block


def bos_text(entry: Entry) -> str:
    meta = entry.metadata
    bos = meta.get("tokenizer.ggml.bos_token_id")
    tokens = meta.get("tokenizer.ggml.tokens") or []
    return tokens[bos] if bos is not None and 0 <= bos < len(tokens) else ""


def eos_text(entry: Entry) -> str:
    meta = entry.metadata
    eos = meta.get("tokenizer.ggml.eos_token_id")
    tokens = meta.get("tokenizer.ggml.tokens") or []
    return tokens[eos] if eos is not None and 0 <= eos < len(tokens) else ""


def without_bos(entry: Entry, text: str) -> str:
    """The runner adds the model's BOS itself: a template that writes it would double it."""
    bos = bos_text(entry)
    return text[len(bos):] if bos and text.startswith(bos) else text


def reply_format(entry: Entry) -> Format:
    """How the model's replies write thinking and calls: what Ollama's parser name says
    (a model pulled with a renderer has no template to tell it by), else its template's."""
    return format_of_parser(entry.parser) or \
        format_for(entry.chat_template or entry.go_template or "")


def _think_value(think: str | None):
    """This server's think (None, "off" or a level) as Ollama's ThinkValue: None, False,
    or the level (true in any level)."""
    return False if think == "off" else think


def chat_prompt(entry: Entry, messages: list[dict], tools: list | None,
                think: str | None) -> Prompt:
    """think: None (not said), "off" or a level."""
    named = entry.named_renderer()
    if named is not None:                        # Ollama's renderer in code, by its name
        text = named(messages, tools or None, _think_value(think))
        fmt = reply_format(entry)
        opened = fmt.think is not None and text.rstrip().endswith(fmt.think[0])
        return Prompt(without_bos(entry, text), fmt, opened)
    template, built_in = entry.chat_template, renderer_for(entry.metadata)
    if template is None and built_in is None and entry.go_template:
        text = render_go(entry.go_template, messages, tools,
                         None if think is None else think != "off", think)
        return Prompt(without_bos(entry, text), format_for(entry.go_template))
    if template is None and built_in is None:
        raise ValueError(f'"{entry.name}" has no chat template; use /api/generate with raw')
    fmt = format_for(template) if built_in is None else \
        next(f for f in FORMATS if f.name == built_in[0])
    effort = HARMONY_EFFORT.get(think or "", think) if fmt.name == "harmony" else think
    if built_in is not None:
        text = built_in[1](messages, tools, effort or "medium")
        return Prompt(text, fmt)
    assert template is not None                  # no built-in renderer: the template's
    extra: dict[str, Any] = {}
    if think is not None:
        extra = {"enable_thinking": think != "off", "reasoning_effort": effort,
                 "thinking": think != "off"}
    text = render(template, messages, bos_text(entry), eos_text(entry), tools=tools, **extra)
    opened = fmt.think is not None and text.rstrip().endswith(fmt.think[0])
    return Prompt(without_bos(entry, text), fmt, opened)


def generate_prompt(entry: Entry, prompt: str, system: str | None, template: str | None,
                    raw: bool, suffix: str = "") -> str:
    """suffix: fill in the middle, with the vocabulary's FIM tokens (fim.py), else through
    a template that reads `suffix` (the prompt as `prompt` and the last message)."""
    if suffix:
        tokens = fim_tokens(entry.metadata)
        if tokens is not None:
            return fim_prompt(tokens, prompt, suffix)
    if raw:
        return prompt
    named = entry.named_renderer() if template is None else None     # before any fallback
    template = template or entry.chat_template
    system = system if system is not None else entry.system
    built_in = renderer_for(entry.metadata) if template is None else None
    messages = ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": prompt}]
    if built_in is not None:
        return built_in[1](messages)
    if named is not None:
        return without_bos(entry, named(messages))
    if template is None and entry.go_template:
        return without_bos(entry, render_go(entry.go_template, messages))
    if template is None:
        return prompt if not system else f"{system}\n\n{prompt}"
    extra: dict[str, Any] = {"suffix": suffix, "prompt": prompt} if suffix else {}
    return without_bos(entry, render(template, messages, bos_text(entry), eos_text(entry),
                                     **extra))
