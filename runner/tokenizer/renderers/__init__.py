"""Prompts rendered in code under the names Ollama's manifests give them (the config blob's
"renderer": model/renderers/renderer.go's rendererForName). Ollama's library ships some
families (Qwen3-Coder, Qwen 3.5, Gemma 4, GLM-4.7, DeepSeek V3.1, OLMo 3, LFM2, Cogito ...)
with such a name and a GGUF without a chat template, so a model pulled from it has no
template of its own to render: these renderers write the prompts Ollama's Go code writes,
byte for byte (each module names its Go file), from messages as the server hands them to
templates, tools as requests give them, and think (None, True/False, or a level).

A name not here is one Ollama knows and this server does not render yet: callers fall back
to the model's template (where it has one) and say so in the log, rather than refuse a model
that may still answer through its Go template."""

from __future__ import annotations

from typing import Callable

from .cohere import render_cohere
from .deepseek import render_cogito, render_deepseek31
from .functiongemma import render_functiongemma
from .gemma4 import render_gemma4, render_gemma4_large
from .glimmer import render_glimmer
from .glm import render_glm47, render_glm_ocr
from .laguna import render_laguna, render_poolside_v1
from .lfm2 import render_lfm2, render_lfm2_thinking
from .nemotron import render_nemotron3_nano, render_nemotron35_nano
from .olmo import render_olmo3, render_olmo3_32b_think, render_olmo3_think, render_olmo31
from .qwen import render_ornith, render_qwen3_coder, render_qwen35
from .qwen38 import render_qwen38
from .qwen_vl import render_qwen3_vl_instruct, render_qwen3_vl_thinking

Render = Callable[..., str]          # (messages, tools=None, think=None) -> the prompt

# Ollama's renderer name -> the function that renders it
RENDERERS: dict[str, Render] = {
    "qwen3-coder": render_qwen3_coder,
    "qwen3.5": render_qwen35,
    "qwen3.8": render_qwen38,
    "ornith": render_ornith,
    "qwen3-vl-instruct": render_qwen3_vl_instruct,
    "qwen3-vl-thinking": render_qwen3_vl_thinking,
    "glm-4.7": render_glm47,
    "glm-ocr": render_glm_ocr,
    "deepseek3.1": render_deepseek31,
    "cogito": render_cogito,
    "olmo3": render_olmo3,
    "olmo3.1": render_olmo31,
    "olmo3-think": render_olmo3_think,
    "olmo3-32b-think": render_olmo3_32b_think,
    "lfm2": render_lfm2,
    "lfm2-thinking": render_lfm2_thinking,
    "cohere": render_cohere,
    "laguna": render_laguna,
    "poolside-v1": render_poolside_v1,
    "gemma4": render_gemma4,                # entry.py picks small or large by size first
    "gemma4-small": render_gemma4,
    "gemma4-large": render_gemma4_large,
    "functiongemma": render_functiongemma,
    "nemotron-3-nano": render_nemotron3_nano,
    "nemotron-3.5-nano": render_nemotron35_nano,
    "glimmer": render_glimmer,
}

# the names Ollama's renderer.go registers that have no renderer here (none at fb30760)
NOT_RENDERED: tuple[str, ...] = ()


def renderer_named(name: str | None) -> Render | None:
    """The renderer Ollama calls name; None for an empty name or one not rendered here."""
    return RENDERERS.get(name or "")


def render_named(name: str, messages: list[dict], tools: list | None = None,
                 think=None) -> str:
    """The prompt of messages through the renderer named name; a ValueError for a name this
    server does not render."""
    render = renderer_named(name)
    if render is None:
        raise ValueError(f'This server does not render Ollama\'s "{name}" prompts in code '
                         f"(it renders {', '.join(sorted(RENDERERS))}).")
    return render(messages, tools or None, think)
