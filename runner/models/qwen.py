"""Qwen2 (Q/K/V biases) and Qwen3 (per-head Q/K RMSNorm): llama-shaped, NEOX rope (their
converter does not permute Q and K). The optional weights live in llama.Llama."""

from __future__ import annotations

from . import register
from .llama import Llama


@register("qwen2")
class Qwen2(Llama):
    rope_mode = "neox"


@register("qwen3")
class Qwen3(Llama):
    rope_mode = "neox"
