"""Gemma 4 (text) as llama.cpp's converter writes it.

Sliding and full layers have their own head size and KV head count: the full layers' are
{arch}.attention.key_length and head_count_kv (an array when they differ per layer), the
sliding layers' key_length_swa. Which layers slide is a per-layer bool array. The full
layers' "proportional" RoPE rotates only the first part of each head: the rope_freqs tensor
gives the other frequencies a factor of 1e30, which stops them. The expert router's scale
and per-expert scale become blk.N.ffn_gate_inp.scale and blk.N.ffn_down_exps.scale; the
experts' fused gate_up projection stays fused (ffn_gate_up_exps), its halves the gate and
the up projection. Norms multiply by their weight as it is (no Gemma `1 + weight`).
"""

from __future__ import annotations

import re
from dataclasses import replace

import gguf
import numpy as np

from ..models.gemma4 import IMAGES_BOTH_WAYS
from .checkpoint import CheckpointError
from .hyper import expected_shape

SLIDING, FULL = "sliding_attention", "full_attention"
STOPPED = 1e30               # a rope frequency factor that leaves its dimensions unrotated
ROUTER_SCALES = re.compile(r"layers\.(\d+)\.router\.(scale|per_expert_scale)$")
ROUTER_NAMES = {"scale": "ffn_gate_inp.scale", "per_expert_scale": "ffn_down_exps.scale"}
LAYER = re.compile(r"^blk\.(\d+)\.")


def layer_kinds(config: dict) -> list[str]:
    """Each layer's attention kind; transformers' default is every sixth layer full."""
    layers = config["num_hidden_layers"]
    return config.get("layer_types") or [FULL if (i + 1) % 6 == 0 else SLIDING
                                         for i in range(layers)]


def attention_shapes(config: dict) -> list[tuple[int, int]]:
    """(KV heads, head size) per layer, from transformers' per_layer_config or the released
    checkpoints' global_head_dim and num_global_key_value_heads."""
    kinds = layer_kinds(config)
    overrides = config.get("per_layer_config")
    if overrides is None:
        full = {"head_dim": config.get("global_head_dim", 512)}
        if config.get("attention_k_eq_v") and config.get("num_global_key_value_heads"):
            full["num_key_value_heads"] = config["num_global_key_value_heads"]
        overrides = {i: full for i, kind in enumerate(kinds) if kind == FULL}
    overrides = {int(i): layer for i, layer in overrides.items()}    # keys as "04" or 4
    base = {"num_key_value_heads": config.get("num_key_value_heads") or
            config["num_attention_heads"], "head_dim": config.get("head_dim", 256)}
    shapes = []
    for i in range(len(kinds)):
        layer = {**base, **overrides.get(i, {})}
        shapes.append((layer["num_key_value_heads"], layer["head_dim"]))
    for kind in set(kinds):
        if len({shapes[i][1] for i in range(len(kinds)) if kinds[i] == kind}) > 1:
            raise CheckpointError(f"This Gemma 4's {kind} layers differ in head size; GGUF "
                                  "holds one head size per kind of layer.")
    return shapes


def ffn_lengths(config: dict) -> list[int]:
    """The dense FFN's width per layer: doubled on the KV-sharing layers with
    use_double_wide_mlp."""
    layers, ffn = config["num_hidden_layers"], config["intermediate_size"]
    first_shared = layers - (config.get("num_kv_shared_layers") or 0)
    wide = 2 if config.get("use_double_wide_mlp") else 1
    return [ffn if i < first_shared else ffn * wide for i in range(layers)]


def _uniform(values: list[int]) -> int | list[int]:
    return values[0] if len(set(values)) == 1 else values


def gemma4_hyper(config: dict, hyper):
    """Hyper with the full layers' head size, and per-layer KV heads and FFN widths."""
    kinds, shapes = layer_kinds(config), attention_shapes(config)
    full = [d for (_, d), kind in zip(shapes, kinds) if kind == FULL]
    return replace(hyper, head_dim=full[0] if full else shapes[0][1],
                   kv_heads=_uniform([h for h, _ in shapes]), ffn=_uniform(ffn_lengths(config)))


def gemma4_hparams(writer: gguf.GGUFWriter, config: dict, h, directory) -> None:
    kinds, shapes = layer_kinds(config), attention_shapes(config)
    rope = config.get("rope_parameters") or {}
    sliding_rope = rope.get(SLIDING, {})
    if sliding_rope.get("rope_type", "default") != "default":
        raise CheckpointError("Gemma 4's sliding layers with "
                              f"{sliding_rope['rope_type']} RoPE are not supported.")
    if config.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh" or \
            config.get("attention_bias") or config.get("use_bidirectional_attention") == "all":
        raise CheckpointError("This Gemma 4 variant (its activation, attention biases or "
                              "bidirectional attention) is not supported.")
    swa_dim = next((d for (_, d), kind in zip(shapes, kinds) if kind == SLIDING), h.head_dim)
    writer.add_sliding_window(config.get("sliding_window", 512))
    writer.add_sliding_window_pattern([kind == SLIDING for kind in kinds])
    writer.add_key_length_swa(swa_dim)
    writer.add_value_length_swa(swa_dim)
    writer.add_rope_dimension_count_swa(swa_dim)
    writer.add_rope_freq_base_swa(float(sliding_rope.get("rope_theta", 10000.0)))
    if config.get("final_logit_softcapping"):
        writer.add_final_logit_softcapping(float(config["final_logit_softcapping"]))
    writer.add_shared_kv_layers(config.get("num_kv_shared_layers") or 0)
    if config.get("use_bidirectional_attention") == "vision":
        writer.add_bool(IMAGES_BOTH_WAYS.format(arch="gemma4"), True)
    writer.add_embedding_length_per_layer_input(config.get("hidden_size_per_layer_input") or 0)
    if config.get("enable_moe_block"):
        writer.add_expert_count(config["num_experts"])
        writer.add_expert_used_count(config["top_k_experts"])
        writer.add_expert_feed_forward_length(config["moe_intermediate_size"])


def gemma4_extra(config: dict, h) -> dict[str, np.ndarray]:
    """rope_freqs for the full layers' proportional RoPE: the rotated frequencies (scaled
    by the rope factor), then stopped ones."""
    rope = (config.get("rope_parameters") or {}).get(FULL, {})
    if rope.get("rope_type") != "proportional":
        return {}
    rotated = int(rope.get("partial_rotary_factor", 1.0) * h.head_dim // 2)
    factors = [rope.get("factor", 1.0)] * rotated + [STOPPED] * (h.head_dim // 2 - rotated)
    return {"rope_freqs.weight": np.array(factors, dtype=np.float32)}


def gemma4_split(entry, config: dict) -> dict | None:
    """The router's scale and per-expert scale, under llama.cpp's names."""
    found = ROUTER_SCALES.search(entry.name)
    if found is None:
        return None
    layer, kind = found.groups()
    return {f"blk.{layer}.{ROUTER_NAMES[kind]}": (entry.shape, entry.load)}


def gemma4_shape(name: str, h, config: dict) -> tuple[int, ...] | None:
    """The shape config implies, with each layer's own head size, KV heads and FFN width."""
    found = LAYER.match(name)
    if found is None:
        return expected_shape(name, replace(h, kv_heads=0, ffn=0))
    i = int(found.group(1))
    kv_heads, head_dim = attention_shapes(config)[i]
    return expected_shape(name, replace(h, kv_heads=kv_heads, head_dim=head_dim,
                                        ffn=ffn_lengths(config)[i]))
