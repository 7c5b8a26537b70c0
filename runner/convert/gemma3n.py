"""Gemma 3n (text) as llama.cpp's converter writes it: AltUp's per-copy projections stacked
into altup_proj and altup_unembd_proj (copies - 1, E, E), the scale parameters under
.weight names, each layer's activation sparsity as its Gaussian std multiplier (the
normal distribution's inverse CDF at the target sparsity), which layers slide as a bool
array. Norms multiply by their weight as it is (no Gemma `1 + weight`).

llama.cpp fixes parts of Gemma 3n's shape in code (the released E2B and E4B share them):
20 cached layers, every fifth layer full, activation sparsity on the first 10 layers at
0.95. The runner reads them from the file; a checkpoint shaped otherwise converts and runs
here, but not in llama.cpp."""

from __future__ import annotations

import re
from dataclasses import replace
from statistics import NormalDist

import gguf
import numpy as np

from .checkpoint import CheckpointError, TensorEntry
from .hyper import Hyper, expected_shape

STACKED = re.compile(r"(altup_projections|altup_unembed_projections)\.(\d+)\.weight$")
STACK_NAMES = ("altup_proj.weight", "altup_unembd_proj.weight")


def gemma3n_hyper(config: dict, h: Hyper) -> Hyper:
    widths = config["intermediate_size"]
    if isinstance(widths, list) and len(set(widths)) != 1:
        raise CheckpointError("Gemma 3n with FFN widths that differ by layer is not "
                              "supported.")
    if config.get("altup_correct_scale", True) is not True:
        raise CheckpointError("Gemma 3n without AltUp's corrected-output scale is not "
                              "supported (llama.cpp always applies it).")
    return h


def gemma3n_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    kinds = config["layer_types"]
    rope = config.get("rope_parameters") or {}
    writer.add_sliding_window(int(config["sliding_window"]))
    writer.add_sliding_window_pattern([kind == "sliding_attention" for kind in kinds])
    local = rope.get("sliding_attention", {}).get("rope_theta")
    if local is not None:
        writer.add_rope_freq_base_swa(float(local))
    writer.add_final_logit_softcapping(float(config.get("final_logit_softcapping") or 0.0))
    writer.add_altup_active_idx(int(config["altup_active_idx"]))
    writer.add_altup_num_inputs(int(config["altup_num_inputs"]))
    writer.add_embedding_length_per_layer_input(int(config["hidden_size_per_layer_input"]))
    writer.add_shared_kv_layers(int(config.get("num_kv_shared_layers", 0)))
    writer.add_activation_sparsity_scale([_std_multiplier(s) for s in
                                          config["activation_sparsity_pattern"]])


def _std_multiplier(sparsity: float) -> float:
    """The cutoff, in standard deviations above the mean, that keeps 1 - sparsity of a
    Gaussian; 0 where there is no sparsity."""
    return float(np.float32(NormalDist().inv_cdf(sparsity))) if sparsity > 0 else 0.0


def stack_altup(checkpoint) -> None:
    """Each layer-free AltUp projection list (altup_projections.0 ... .A-2) as one stacked
    tensor (A - 1, E, E), named as llama.cpp's converter names it (in place)."""
    groups: dict[str, dict[int, TensorEntry]] = {}
    for name, entry in checkpoint.tensors.items():
        found = STACKED.search(name)
        if found:
            groups.setdefault(name[:found.start(2)].rstrip("."), {})[int(found.group(2))] = entry
    for prefix, parts in groups.items():
        if sorted(parts) != list(range(len(parts))):
            raise CheckpointError(f"The projections under {prefix} are incomplete.")
        entries = [parts[i] for i in range(len(parts))]
        for entry in entries:
            del checkpoint.tensors[entry.name]
        rows, columns = entries[0].shape
        name = f"{prefix}.weight"

        def stacked(entries: list[TensorEntry] = entries) -> np.ndarray:
            return np.stack([e.load() for e in entries])

        checkpoint.tensors[name] = replace(entries[0], name=name,
                                           shape=(len(entries), rows, columns), load=stacked)


def gemma3n_shape(name: str, h: Hyper, config: dict) -> tuple[int, ...] | None:
    widths = config["intermediate_size"]
    ffn = widths[0] if isinstance(widths, list) else widths
    if name in STACK_NAMES:
        return (config["altup_num_inputs"] - 1, h.embd, h.embd)
    return expected_shape(name, replace(h, ffn=ffn))
