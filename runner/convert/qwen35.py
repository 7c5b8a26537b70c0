"""Qwen 3.5 (qwen3_5_text, qwen3_5_moe_text) and Qwen3-Next (qwen3_next) checkpoints as
llama.cpp's converter writes them (qwen35, qwen35moe, qwen3next).

A DeltaNet layer's tensors change on the way: ssm_a = -exp(A_log); the convolution's
kernel loses its middle dimension and stays F32; its norm (ssm_norm) keeps its weight
where every other norm gets its +1 (Architecture.norm_shift); Qwen3-Next's fused
in_proj_qkvz (per key head [q, k, v, z]) becomes attn_qkv (all q, all k, all v) and
attn_gate. Qwen 3.5's value heads are reordered from transformers' grouped order (value
head j reads key head j // r) to the tiled order ggml's gated_delta_net broadcasts in
(j reads j % H_k), in every tensor indexed by value head.

The MTP head (mtp.*, which transformers neither saves nor loads) is kept as llama.cpp's
converter keeps it, for speculative decoding: its layers follow the model's as full-attention
blocks (block_count counts them, nextn_predict_layers says how many), its projection and
norms as blk.N.nextn.{eh_proj,enorm,hnorm,shared_head_norm}. The runner does not run them
(nor load them).
"""

from __future__ import annotations

import re
from dataclasses import replace

import gguf
import numpy as np

from .checkpoint import CheckpointError
from .experts import fused_experts_split
from .hyper import Hyper

LINEAR = re.compile(r"layers\.(\d+)\.linear_attn\.(\w+?(?:\.weight)?)$")
SHARED = re.compile(r"layers\.(\d+)\.mlp\.(shared_expert_gate|shared_expert\.(gate|up|down)"
                    r"_proj|gate)\.weight$")
QWEN35_SECTIONS = [11, 11, 10]          # transformers' default M-RoPE sections
MTP_LAYER = re.compile(r"^(?:model\.)?mtp\.layers\.(\d+)\.(.+)$")
MTP_PART = re.compile(r"^(?:model\.)?mtp\.(fc|pre_fc_norm_embedding|pre_fc_norm_hidden|norm)"
                      r"\.weight$")
NEXTN = {"fc": "eh_proj", "pre_fc_norm_embedding": "enorm", "pre_fc_norm_hidden": "hnorm",
         "norm": "shared_head_norm"}
MTP_LAYERS = "mtp_num_hidden_layers"


def qwen35_prepare(checkpoint) -> None:
    """The MTP head's layers renamed as the layers after the model's (llama.cpp's way), and
    their number, as found, in the config."""
    base, found = checkpoint.config["num_hidden_layers"], 0
    for name, entry in list(checkpoint.tensors.items()):
        match = MTP_LAYER.match(name)
        if match:
            index, rest = int(match.group(1)), match.group(2)
            new = f"model.layers.{base + index}.{rest}"
            del checkpoint.tensors[name]
            checkpoint.tensors[new] = replace(entry, name=new)
            found = max(found, index + 1)
    checkpoint.config[MTP_LAYERS] = found


def qwen35_hyper(config: dict, h: Hyper) -> Hyper:
    """The rotated dimensions: a part of each head (partial_rotary_factor)."""
    rope = config.get("rope_parameters") or {}
    factor = rope.get("partial_rotary_factor", config.get("partial_rotary_factor", 0.25))
    return replace(h, rope_dims=int(h.head_dim * factor), rope_scaling=None,
                   layers=h.layers + config.get(MTP_LAYERS, 0))


def qwen35_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    """The DeltaNet's sizes, which layers are recurrent, M-RoPE's sections (Qwen 3.5), the
    experts and the shared expert (MoE)."""
    arch = writer.arch
    key_dim, value_dim = config["linear_key_head_dim"], config["linear_value_head_dim"]
    if key_dim != value_dim:
        raise CheckpointError(f"This checkpoint's DeltaNet keys ({key_dim}) and values "
                              f"({value_dim}) differ in head size; llama.cpp's {arch} needs "
                              "them equal.")
    key_heads, value_heads = config["linear_num_key_heads"], config["linear_num_value_heads"]
    if value_heads % key_heads:
        raise CheckpointError(f"{value_heads} value heads are not a multiple of {key_heads} "
                              "key heads.")
    writer.add_ssm_conv_kernel(config.get("linear_conv_kernel_dim", 4))
    writer.add_ssm_state_size(key_dim)
    writer.add_ssm_group_count(key_heads)
    writer.add_ssm_time_step_rank(value_heads)
    writer.add_ssm_inner_size(value_dim * value_heads)
    interval, layers = config.get("full_attention_interval", 4), config["num_hidden_layers"]
    kinds = config.get("layer_types") or ["full_attention" if (i + 1) % interval == 0 else
                                          "linear_attention" for i in range(layers)]
    mtp = h.layers - layers                  # MTP layers: full-attention blocks
    writer.add_array(f"{arch}.attention.recurrent_layers",
                     [kind == "linear_attention" for kind in kinds] + [False] * mtp)
    if mtp:
        writer.add_nextn_predict_layers(mtp)
    writer.add_full_attention_interval(interval)
    if arch != "qwen3next":
        rope = config.get("rope_parameters") or {}
        sections = list(rope.get("mrope_section") or QWEN35_SECTIONS)
        writer.add_rope_dimension_sections(sections + [0] * (4 - len(sections)))
    if config.get("num_experts"):
        if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) != 1:
            raise CheckpointError("This checkpoint has dense layers among its expert layers; "
                                  f"llama.cpp's {arch} has experts on every layer.")
        writer.add_expert_count(config["num_experts"])
        writer.add_expert_used_count(config["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
        writer.add_expert_shared_feed_forward_length(config["shared_expert_intermediate_size"])


def _tiled(data: np.ndarray, axis: int, key_heads: int, size: int) -> np.ndarray:
    """data's value heads along axis (each size wide) from grouped (key head, r) to tiled
    (r, key head) order."""
    shape = list(data.shape)
    grouped = data.reshape(*shape[:axis], key_heads, -1, size, *shape[axis + 1:])
    return np.ascontiguousarray(np.swapaxes(grouped, axis, axis + 1).reshape(shape))


def qwen35_split(entry, config: dict) -> dict | None:
    """The tensors that do not simply rename: the DeltaNet's, the shared expert's, the
    router's, the experts', and the MTP head's own."""
    found = MTP_PART.match(entry.name)
    if found:
        name = f"blk.{config['num_hidden_layers']}.nextn.{NEXTN[found.group(1)]}.weight"
        shift = 0.0 if found.group(1) == "fc" else 1.0        # norms: +1, as all but ssm_norm
        return {name: (entry.shape, lambda: np.asarray(entry.load(), np.float32) + shift)}
    found = SHARED.search(entry.name)
    if found:
        layer, kind = found.group(1), found.group(2)
        name = {"shared_expert_gate": "ffn_gate_inp_shexp", "gate": "ffn_gate_inp"}.get(
            kind) or f"ffn_{found.group(3)}_shexp"
        if kind == "shared_expert_gate":          # (1, E) -> (E,), F32 as a 1-D tensor
            return {f"blk.{layer}.{name}.weight": ((entry.shape[-1],),
                                                   lambda: entry.load().reshape(-1))}
        return {f"blk.{layer}.{name}.weight": (entry.shape, entry.load)}
    found = LINEAR.search(entry.name)
    if found is None:
        return fused_experts_split(entry, config)
    layer, part = found.groups()
    tiled = config.get("model_type") != "qwen3_next"
    return _linear_attention(entry, f"blk.{layer}.", part.removesuffix(".weight"), config,
                             tiled)


def _linear_attention(entry, prefix: str, part: str, config: dict, tiled: bool) -> dict:
    s, hk = config["linear_key_head_dim"], config["linear_num_key_heads"]
    hv = config["linear_num_value_heads"]
    key_dim, value_dim = s * hk, config["linear_value_head_dim"] * hv

    def heads(data, axis: int, size: int):
        return _tiled(data, axis, hk, size) if tiled and hk != hv else data

    def qkv_rows(data):                                # V's rows after Q's and K's
        v = heads(data[2 * key_dim:], 0, s)
        return np.concatenate([data[:2 * key_dim], v])

    if part == "in_proj_qkvz":                         # Qwen3-Next: [q, k, v, z] per key head
        r = hv // hk

        def piece(start: int, size: int):
            def load():
                rows = entry.load().reshape(hk, 2 * s + 2 * r * s, -1)[:, start:start + size]
                return np.ascontiguousarray(rows.reshape(hk * size, -1))
            return load

        embd = entry.shape[-1]
        qkv = (piece(0, s), piece(s, s), piece(2 * s, r * s))
        return {f"{prefix}attn_qkv.weight": ((2 * key_dim + value_dim, embd),
                                             lambda: np.concatenate([f() for f in qkv])),
                f"{prefix}attn_gate.weight": ((value_dim, embd), piece(2 * s + r * s, r * s))}
    table = {
        "in_proj_ba": ("ssm_ba.weight", lambda d: d),
        "in_proj_qkv": ("attn_qkv.weight", qkv_rows),
        "in_proj_z": ("attn_gate.weight", lambda d: heads(d, 0, s)),
        "in_proj_a": ("ssm_alpha.weight", lambda d: heads(d, 0, 1)),
        "in_proj_b": ("ssm_beta.weight", lambda d: heads(d, 0, 1)),
        "A_log": ("ssm_a", lambda d: -np.exp(heads(d, 0, 1))),
        "dt_bias": ("ssm_dt.bias", lambda d: heads(d, 0, 1)),
        "conv1d": ("ssm_conv1d.weight", lambda d: qkv_rows(d.reshape(d.shape[0], -1))),
        "norm": ("ssm_norm.weight", lambda d: d),
        "out_proj": ("ssm_out.weight", lambda d: heads(d, 1, s)),
    }
    if part not in table:
        raise CheckpointError(f"The tensor {entry.name} has no GGUF name for this model.")
    name, change = table[part]
    shape = (entry.shape[0], entry.shape[-1]) if part == "conv1d" else entry.shape
    return {prefix + name: (shape, lambda: change(np.asarray(entry.load(), np.float32)))}
