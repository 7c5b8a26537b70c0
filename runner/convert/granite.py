"""Granite 3.x and Granite MoE as llama.cpp's converter writes them: its multipliers as the
granite keys, the experts' fused gate and up projections (and the shared expert's) split
into llama.cpp's tensors."""

from __future__ import annotations

import re

import gguf
import numpy as np

from .checkpoint import CheckpointError
from .hyper import Hyper

# config.json's multiplier -> what writes it; transformers' default for each is 1.0, which
# it uses as the multiplier itself (an attention_multiplier of 1 scales the scores by 1)
MULTIPLIERS = {"attention_multiplier": gguf.GGUFWriter.add_attention_scale,
               "embedding_multiplier": gguf.GGUFWriter.add_embedding_scale,
               "residual_multiplier": gguf.GGUFWriter.add_residual_scale,
               "logits_scaling": gguf.GGUFWriter.add_logit_scale}


def granite_hyper(config: dict, h: Hyper) -> Hyper:
    """Granite's head is hidden_size / num_attention_heads (llama.cpp's converter drops a
    head_dim, which transformers would use)."""
    if config.get("head_dim") not in (None, h.embd // h.heads):
        raise CheckpointError(f"This Granite's head_dim ({config['head_dim']}) is not "
                              f"hidden_size / num_attention_heads ({h.embd // h.heads}), the "
                              "only head size llama.cpp's granite knows.")
    return h


def granite_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    """Every multiplier, with transformers' default of 1 where config.json has none; a 0 is
    refused (GGUF's 0 means none: attention would then scale by 1/sqrt(head size), and a
    logit scale divides)."""
    for name, add in MULTIPLIERS.items():
        value = 1.0 if config.get(name) is None else float(config[name])
        if value == 0:
            raise CheckpointError(f"This Granite's {name} is 0, which GGUF reads as no "
                                  "multiplier; it is not supported.")
        add(writer, value)


def granitemoe_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    """Granite's multipliers and its experts (their width is intermediate_size), with the
    shared expert's width where it has one."""
    granite_hparams(writer, config, h, directory)
    if not config.get("num_local_experts"):
        raise CheckpointError("This Granite MoE has no experts (num_local_experts); "
                              "convert it as a dense Granite.")
    writer.add_expert_count(config["num_local_experts"])
    writer.add_expert_used_count(config["num_experts_per_tok"])
    if config.get("shared_intermediate_size"):
        writer.add_expert_shared_feed_forward_length(config["shared_intermediate_size"])


FUSED = re.compile(r"layers\.(\d+)\.(block_sparse_moe|shared_mlp)\.input_linear\.weight$")
# the fused projection's halves -> their GGUF names: the experts', the shared expert's
HALVES = {"block_sparse_moe": ("ffn_gate_exps", "ffn_up_exps"),
          "shared_mlp": ("ffn_gate_shexp", "ffn_up_shexp")}


def granitemoe_split(entry, config: dict) -> dict | None:
    """input_linear, (experts, 2F, E) or the shared expert's (2F, E): its first F rows are
    the gate, the rest the up projection (as transformers' chunk(2) reads them)."""
    found = FUSED.search(entry.name)
    if found is None:
        return None
    layer, kind = found.groups()
    *outer, rows, columns = entry.shape
    if rows % 2:
        raise CheckpointError(f"The tensor {entry.name} has {rows} rows, not a gate's and an "
                              "up projection's alike.")
    half = (*outer, rows // 2, columns)

    def part(index):
        return lambda: np.ascontiguousarray(np.split(entry.load(), 2, axis=-2)[index])

    gate, up = HALVES[kind]
    return {f"blk.{layer}.{gate}.weight": (half, part(0)),
            f"blk.{layer}.{up}.weight": (half, part(1))}
