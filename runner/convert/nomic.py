"""Nomic BERT checkpoints (their own config.json names, GPT-2's) as llama.cpp's converter
writes them: nomic-bert (nomic-embed-text v1/v1.5) and nomic-bert-moe
(nomic-embed-text-v2-moe)."""

from __future__ import annotations

import re
from dataclasses import replace

import gguf
import numpy as np

from .checkpoint import CheckpointError
from .hyper import Hyper

# Nomic's config.json names -> the names the common hyper-parameters read
NOMIC_NAMES = {"n_embd": "hidden_size", "n_head": "num_attention_heads",
               "n_layer": "num_hidden_layers", "n_inner": "intermediate_size",
               "layer_norm_epsilon": "layer_norm_eps", "rotary_emb_base": "rope_theta"}
# what llama.cpp's nomic-bert and nomic-bert-moe run: anything else is refused
NOMIC_REQUIRES = {"prenorm": False, "rotary_emb_fraction": 1.0,
                  "rotary_emb_interleaved": False, "rotary_emb_scale_base": None}
DENSE_REQUIRES = {"activation_function": "swiglu", "qkv_proj_bias": False,
                  "mlp_fc1_bias": False, "mlp_fc2_bias": False}
MOE_REQUIRES = {"activation_function": "gelu", "qkv_proj_bias": True, "mlp_fc1_bias": True,
                "mlp_fc2_bias": True, "moe_normalize_expert_weights": False,
                "expert_choice_router": False}
# (n_positions, max_trained_positions) -> the context llama.cpp's converter writes: v1 and
# v1.5 are trained for 2048 tokens, v2-moe for 512
CONTEXTS = {(8192, 2048): 2048, (2048, 2048): 512}
EXPERT_MLP = re.compile(r"layers\.(\d+)\.mlp\.experts\.(mlp\.w1|mlp\.w2|bias)$")


def _check(config: dict, requires: dict, arch: str) -> None:
    for key, value in {**NOMIC_REQUIRES, **requires}.items():
        if config.get(key, value) != value:
            raise CheckpointError(f"This Nomic BERT has {key} = {config[key]!r}; llama.cpp's "
                                  f"{arch} runs {value!r} only.")


def _context(config: dict) -> int:
    trained = (config.get("n_positions", 8192), config.get("max_trained_positions", 2048))
    if trained not in CONTEXTS:
        raise CheckpointError(f"This Nomic BERT has n_positions = {trained[0]} and "
                              f"max_trained_positions = {trained[1]}; llama.cpp's converter "
                              f"knows {', '.join(map(str, CONTEXTS))}.")
    return CONTEXTS[trained]


def nomic_hyper(config: dict, h: Hyper) -> Hyper:
    if config.get("moe_every_n_layers"):
        raise CheckpointError("This Nomic BERT has experts; it converts as nomic-bert-moe.")
    _check(config, DENSE_REQUIRES, "nomic-bert")
    return replace(h, context=_context(config))


def nomic_moe_hyper(config: dict, h: Hyper) -> Hyper:
    _check(config, MOE_REQUIRES, "nomic-bert-moe")
    return replace(h, context=_context(config))


def nomic_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    writer.add_layer_norm_eps(float(config.get("layer_norm_epsilon", 1e-12)))
    writer.add_causal_attention(False)
    writer.add_token_type_count(int(config.get("type_vocab_size", 2)))


def nomic_moe_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    nomic_hparams(writer, config, h, directory)
    writer.add_expert_count(int(config["num_experts"]))
    writer.add_expert_used_count(int(config["moe_top_k"]))
    writer.add_moe_every_n_layers(int(config["moe_every_n_layers"]))


def nomic_moe_split(entry, config: dict) -> dict | None:
    """Each layer's experts as one (experts * ffn, embd) matrix per projection (megablocks'
    layout) -> ffn_up_exps (X, F, E) and ffn_down_exps (X, E, F). The experts' output bias
    is left out, as llama.cpp's converter leaves it out (its graph has no place for it;
    nomic-embed-text-v2-moe's embeddings move by it)."""
    found = EXPERT_MLP.search(entry.name)
    if found is None:
        return None
    layer, kind = found.groups()
    if kind == "bias":
        return {}
    experts, ffn = int(config["num_experts"]), int(config["n_inner"])
    embd = entry.shape[1]
    if kind == "mlp.w1":
        return {f"blk.{layer}.ffn_up_exps.weight":
                ((experts, ffn, embd), lambda: entry.load().reshape(experts, ffn, embd))}
    return {f"blk.{layer}.ffn_down_exps.weight":
            ((experts, embd, ffn), lambda: np.ascontiguousarray(
                entry.load().reshape(experts, ffn, embd).transpose(0, 2, 1)))}
