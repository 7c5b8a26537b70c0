"""Mixture-of-experts tensors as llama.cpp's converter writes them: one (experts, out, in)
tensor per projection, whether the checkpoint holds them fused (transformers' gate_up_proj
and down_proj) or one per expert (the released checkpoints)."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from .checkpoint import CheckpointError, TensorEntry

FUSED_MLP_EXPERTS = re.compile(r"layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$")


def fused_experts_split(entry, config: dict) -> dict | None:
    """transformers' fused experts, (experts, out, in) as each expert's Linear holds them:
    gate_up_proj's halves (gate first) and down_proj, under llama.cpp's names."""
    found = FUSED_MLP_EXPERTS.search(entry.name)
    if found is None:
        return None
    layer, kind = found.groups()
    if kind == "down_proj":
        return {f"blk.{layer}.ffn_down_exps.weight": (entry.shape, entry.load)}
    experts, rows, columns = entry.shape
    half = (experts, rows // 2, columns)

    def part(index):
        return lambda: np.ascontiguousarray(np.split(entry.load(), 2, axis=1)[index])

    return {f"blk.{layer}.ffn_gate_exps.weight": (half, part(0)),
            f"blk.{layer}.ffn_up_exps.weight": (half, part(1))}


# one tensor per expert, as released checkpoints name them: a pattern giving the layer, the
# expert and its part, and the parts' names -> gate, up, down
PER_EXPERT = (
    (re.compile(r"^(.*layers\.\d+)\.mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight$"),
     {"gate": "gate", "up": "up", "down": "down"}),
    (re.compile(r"^(.*layers\.\d+)\.block_sparse_moe\.experts\.(\d+)\.(w1|w2|w3)\.weight$"),
     {"w1": "gate", "w3": "up", "w2": "down"}),                          # Mixtral's
)


def fuse_experts(checkpoint) -> None:
    """Released MoE checkpoints hold one tensor per expert (mlp.experts.<e>.gate_proj ...,
    Mixtral's block_sparse_moe.experts.<e>.w1 ...): make them the fused tensors transformers
    builds from them, <layer>.mlp.experts.gate_up_proj and down_proj (in place)."""
    groups: dict[str, dict[int, dict[str, TensorEntry]]] = {}
    for name, entry in checkpoint.tensors.items():
        for pattern, roles in PER_EXPERT:
            found = pattern.match(name)
            if found:
                layer, expert, part = found.groups()
                groups.setdefault(f"{layer}.mlp.experts", {}).setdefault(
                    int(expert), {})[roles[part]] = entry
    for prefix, experts in groups.items():
        order = [experts[e] for e in sorted(experts)]
        if sorted(experts) != list(range(len(experts))) or \
                any(set(parts) != {"gate", "up", "down"} for parts in order):
            raise CheckpointError(f"The experts under {prefix} are incomplete.")
        for parts in order:
            for entry in parts.values():
                del checkpoint.tensors[entry.name]
        gate, down = order[0]["gate"].shape, order[0]["down"].shape

        def gate_up(order=order):
            return np.stack([np.concatenate([p["gate"].load(), p["up"].load()]) for p in order])

        def downs(order=order):
            return np.stack([p["down"].load() for p in order])

        for name, shape, load in ((f"{prefix}.gate_up_proj", (len(order), 2 * gate[0], gate[1]),
                                   gate_up),
                                  (f"{prefix}.down_proj", (len(order), *down), downs)):
            checkpoint.tensors[name] = replace(order[0]["gate"], name=name, shape=shape,
                                               load=load)
