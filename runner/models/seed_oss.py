"""Seed-OSS: a Llama block with Q, K and V biases and NEOX rope (its converter does not
permute Q and K), whose norm before the FFN is stored as post_attention_norm (transformers'
post_attention_layernorm, as llama.cpp's seed_oss names it)."""

from __future__ import annotations

from .contract import register
from .llama import Llama


@register("seed_oss")
class SeedOss(Llama):
    rope_mode = "neox"
    ffn_norm_name = "post_attention_norm"
