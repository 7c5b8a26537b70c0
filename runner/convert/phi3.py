"""Phi-3, Phi-3.5, Phi-4 and Phi-4-mini checkpoints (Phi3ForCausalLM) as llama.cpp's converter
writes them: the rotated dimensions from partial_rotary_factor, the original context, the
sliding window (0 where there is none; llama.cpp reads and disables it), and LongRoPE's two
sets of frequency factors as the global tensors rope_factors_long and rope_factors_short,
with the attention factor llama.cpp derives from the context's growth (transformers' explicit
attention_factor and factor are not read, as llama.cpp reads neither). Q, K and V stay one
tensor (attn_qkv) and the FFN's gate and up one (ffn_up), as the checkpoint holds them."""

from __future__ import annotations

import math
from dataclasses import replace

import gguf
import numpy as np

from .checkpoint import CheckpointError
from .hyper import Hyper

# LongRoPE's attention factor by rope type, from the context's growth s over the original
# context n (s > 1; else 1), as llama.cpp's converter computes it
ATTENTION_FACTORS = {"longrope": lambda s, n: math.sqrt(1 + math.log(s) / math.log(n)),
                     "su": lambda s, n: math.sqrt(1 + math.log(s) / math.log(n)),
                     "yarn": lambda s, n: 0.1 * math.log(s) + 1.0}


def _rope(config: dict) -> dict:
    return config.get("rope_parameters") or config.get("rope_scaling") or {}


def _original_context(config: dict, h: Hyper) -> int:
    return int(_rope(config).get("original_max_position_embeddings",
                                 config.get("original_max_position_embeddings", h.context)))


def phi3_hyper(config: dict, h: Hyper) -> Hyper:
    """The rotated dimensions: partial_rotary_factor of the embedding over the heads (as
    llama.cpp computes them); the context from n_positions where the config says so; no
    scaling for the common keys (LongRoPE is written by phi3_hparams and phi3_extra)."""
    partial = _rope(config).get("partial_rotary_factor",
                                config.get("partial_rotary_factor", 1.0))
    return replace(h, rope_dims=int(partial * h.embd) // h.heads, rope_scaling=None,
                   context=config.get("n_positions") or h.context)


def phi3_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    writer.add_rope_scaling_orig_ctx_len(_original_context(config, h))
    writer.add_sliding_window(int(config.get("sliding_window") or 0))
    if _factors(config, h) is None:
        return
    rope, original = _rope(config), _original_context(config, h)
    kind = str(rope.get("rope_type", rope.get("type", ""))).lower()
    if kind not in ATTENTION_FACTORS:
        raise CheckpointError(f"Phi-3's rope scaling {kind!r} with long and short factors is "
                              f"not supported; llama.cpp knows {', '.join(ATTENTION_FACTORS)}.")
    growth = h.context / original
    writer.add_rope_scaling_attn_factors(
        ATTENTION_FACTORS[kind](growth, original) if growth > 1.0 else 1.0)


def phi3_extra(config: dict, h: Hyper) -> dict[str, np.ndarray]:
    """rope_factors_long and rope_factors_short (F32, one per rotated pair)."""
    factors = _factors(config, h)
    if factors is None:
        return {}
    long, short = factors
    return {"rope_factors_long.weight": long, "rope_factors_short.weight": short}


def _factors(config: dict, h: Hyper) -> tuple[np.ndarray, np.ndarray] | None:
    """LongRoPE's (long, short) factors, each checked: one finite positive number per
    rotated pair. None: the checkpoint has none."""
    rope = _rope(config)
    if not rope.get("long_factor"):
        return None
    pairs = (h.rope_dims or h.head_dim) // 2
    found = []
    for key in ("long_factor", "short_factor"):
        values = rope.get(key)
        if not isinstance(values, list) or len(values) != pairs or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and
                math.isfinite(v) and v > 0 for v in values):
            raise CheckpointError(f"config.json's rope {key} must be {pairs} positive numbers, "
                                  "one per rotated pair of a head.")
        found.append(np.array(values, dtype=np.float32))
    return found[0], found[1]
