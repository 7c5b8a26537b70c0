"""Gemma 4 12B ("unified": Gemma4UnifiedForConditionalGeneration) as llama.cpp's converter
writes it: the text model is any Gemma 4's (convert/gemma4.py, general.architecture gemma4),
read with the unified config's own defaults, and generation_config.json's suppress_tokens
become tokenizer.ggml.suppress_tokens (an INT32 array, written as the file gives them: the
loader drops ids outside the vocabulary, as llama.cpp's does), which the sampler never
draws."""

from __future__ import annotations

from pathlib import Path

import gguf

from ..tokenizer.vocab import SUPPRESS_TOKENS
from .checkpoint import CheckpointError, read_json
from .gemma4 import gemma4_hparams

# transformers' Gemma4UnifiedTextConfig defaults where they differ from Gemma4TextConfig's
# (a config.json may leave them out); it has no per-layer embeddings and no experts, whose
# absence the plain converter reads as none already
UNIFIED_DEFAULTS = {"sliding_window": 1024, "max_position_embeddings": 262144,
                    "use_bidirectional_attention": "vision"}
INT32 = range(-2**31, 2**31)


def gemma4_unified_prepare(checkpoint) -> None:
    """The unified config's defaults for what its config.json leaves out."""
    checkpoint.config = {**UNIFIED_DEFAULTS, **checkpoint.config}


def gemma4_unified_hparams(writer: gguf.GGUFWriter, config: dict, h, directory) -> None:
    gemma4_hparams(writer, config, h, directory)
    suppressed = suppress_tokens(Path(directory))
    if suppressed:                  # an empty array has no item type to write
        writer.add_array(SUPPRESS_TOKENS, suppressed)


def suppress_tokens(directory: Path) -> list[int] | None:
    """generation_config.json's suppress_tokens (None where it has none)."""
    path = directory / "generation_config.json"
    if not path.exists():
        return None
    found = read_json(path).get("suppress_tokens")
    if found is None:
        return None
    if not isinstance(found, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t in INT32 for t in found):
        raise CheckpointError(f"generation_config.json's suppress_tokens is {found!r:.200}, "
                              "not a list of token ids.")
    return found
