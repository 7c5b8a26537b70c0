"""Sequence embeddings: pooling the final hidden states of a prompt, as the GGUF declares
({arch}.pooling_type, llama.cpp's numbering)."""

from __future__ import annotations

import numpy as np

POOLING_TYPES = {0: None, 1: "mean", 2: "cls", 3: "last"}     # 4 (rank) needs a classifier
POOLERS = {"mean": lambda h: h.mean(0), "cls": lambda h: h[0], "last": lambda h: h[-1]}


def pooling_of(meta: dict) -> str | None:
    """The model's pooling, or None for a generative model (no pooling declared)."""
    value = meta.get(f"{meta.get('general.architecture')}.pooling_type")
    if value is None:
        return None
    if not isinstance(value, int) or value not in POOLING_TYPES:
        raise ValueError(f"Pooling type {value} is not supported; this runner pools by "
                         "mean, cls or last token.")
    return POOLING_TYPES[value]


def pool(hidden: np.ndarray, kind: str) -> np.ndarray:
    """hidden (T, E) -> (E,)"""
    return POOLERS[kind](hidden)
