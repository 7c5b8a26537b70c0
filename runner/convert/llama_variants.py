"""The llama-shaped checkpoints llama.cpp's converter writes with the common keys and
little more: SmolLM3 (layers without rope), Seed-OSS (Q/K/V biases), Mixtral (llama's
experts). What each of llama.cpp's architectures cannot express in such a checkpoint is
refused here."""

from __future__ import annotations

import gguf

from .checkpoint import CheckpointError
from .hyper import Hyper

SMOLLM3_NO_ROPE_STEP = 4        # llama.cpp's smollm3 fixes it: every fourth layer unrotated


def smollm3_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    """Nothing beyond the common keys: llama.cpp's smollm3 leaves every fourth layer
    unrotated whatever the file says, so a checkpoint whose no_rope_layers differ, or
    with sliding layers or biases (which it does not read), is refused."""
    step = SMOLLM3_NO_ROPE_STEP
    pattern = [int((i + 1) % step != 0) for i in range(h.layers)]
    if config.get("no_rope_layers", pattern) != pattern:
        raise CheckpointError(f"This SmolLM3's no_rope_layers are not every {step}th layer "
                              f"without rope, the only pattern llama.cpp's smollm3 knows.")
    if config.get("use_sliding_window") and config.get("sliding_window"):
        raise CheckpointError("SmolLM3 with sliding layers is not supported (llama.cpp's "
                              "smollm3 has none).")
    if config.get("attention_bias") or config.get("mlp_bias"):
        raise CheckpointError("SmolLM3 with biases is not supported (llama.cpp's smollm3 "
                              "reads no output or FFN biases).")


def seed_oss_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    """Seed-OSS's Q, K and V biases are read; an output or FFN bias is not (llama.cpp's
    seed_oss has none), so a checkpoint with one is refused."""
    if config.get("attention_out_bias") or config.get("mlp_bias"):
        raise CheckpointError("Seed-OSS with an attention output or FFN bias is not "
                              "supported (llama.cpp's seed_oss reads neither).")


def mixtral_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    """Mixtral is llama.cpp's llama with experts: their count and how many a token uses.
    llama.cpp attends to the whole context, so a sliding window shorter than it is
    refused."""
    window = config.get("sliding_window")
    if window is not None and window < h.context:
        raise CheckpointError(f"This Mixtral attends within a window of {window} positions; "
                              "llama.cpp's llama has no window, so it is not supported.")
    writer.add_expert_count(config["num_local_experts"])
    writer.add_expert_used_count(config["num_experts_per_tok"])
