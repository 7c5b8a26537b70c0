"""DeepSeek V2 and V3 checkpoints (model_type deepseek_v2, deepseek_v3; GLM-4.7-Flash's
glm4_moe_lite, V3's architecture with its dense layers listed) -> deepseek2 GGUF,
as llama.cpp's converter writes them: kv_b split into k_b (transposed) and v_b for latent
attention, one KV head of rank + rotated dimensions, the router's score correction as
exp_probs_b.bias, the multi-token-prediction layers left out.

Where a checkpoint asks for what llama.cpp's deepseek2 cannot do, the converter refuses
rather than write a file that runs differently: attention biases, rotate-half rope, YaRN
whose mscale differs from mscale_all_dim. One difference it lets through, as llama.cpp does:
V2's group-limited routing scores a group by its best expert, llama.cpp (and the runner) by
its best two, as V3 does; the released V2 models that use groups are the 236B ones."""

from __future__ import annotations

import re
from dataclasses import replace

import gguf
import numpy as np

from .checkpoint import CheckpointError
from .experts import fused_experts_split
from .hyper import Hyper, expected_shape

LAYER = re.compile(r"layers\.(\d+)\.")
GATING = {"softmax": gguf.ExpertGatingFuncType.SOFTMAX,
          "sigmoid": gguf.ExpertGatingFuncType.SIGMOID}
DEFAULT_GATING = {"deepseek_v2": "softmax", "deepseek_v3": "sigmoid", "glm4_moe_lite": "sigmoid"}


def deepseek2_hyper(config: dict, h: Hyper) -> Hyper:
    """One KV head of the latent rank and the rotated part; YaRN's mscale left to
    deepseek2_hparams (it becomes the score's scale, not the rotation's)."""
    if config.get("attention_bias"):
        raise CheckpointError("DeepSeek with attention biases is not supported (llama.cpp's "
                              "deepseek2 has none).")
    if config.get("rope_interleave", True) is not True:
        raise CheckpointError("This DeepSeek rotates halves, not interleaved pairs; "
                              "llama.cpp's deepseek2 knows only the latter.")
    rank, rotated = config["kv_lora_rank"], config["qk_rope_head_dim"]
    scaling = dict(h.rope_scaling or {})
    if scaling.get("rope_type", scaling.get("type")) == "yarn":
        if "mscale_all_dim" not in scaling or \
                scaling.get("mscale", scaling["mscale_all_dim"]) != scaling["mscale_all_dim"]:
            raise CheckpointError("This DeepSeek's YaRN has no mscale_all_dim or an mscale "
                                  "that differs from it; llama.cpp's deepseek2 takes them "
                                  "equal.")
        scaling.pop("mscale", None)
        scaling.pop("mscale_all_dim", None)
    return replace(h, kv_heads=1, head_dim=config["qk_nope_head_dim"] + rotated,
                   key_length=rank + rotated, value_length=rank, rope_dims=rotated,
                   rope_scaling=scaling or None)


def deepseek2_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type")) == "yarn":
        writer.add_rope_scaling_yarn_log_mul(0.1 * float(rope["mscale_all_dim"]))
    writer.add_leading_dense_block_count(_leading_dense(config))
    writer.add_q_lora_rank(int(config.get("q_lora_rank") or 0))     # llama.cpp needs the key
    writer.add_kv_lora_rank(int(config["kv_lora_rank"]))
    writer.add_key_length_mla(int(config["qk_nope_head_dim"] + config["qk_rope_head_dim"]))
    writer.add_value_length_mla(int(config["v_head_dim"]))
    writer.add_expert_feed_forward_length(int(config["moe_intermediate_size"]))
    writer.add_expert_count(int(config.get("n_routed_experts") or config["num_local_experts"]))
    writer.add_expert_used_count(int(config["num_experts_per_tok"]))
    writer.add_expert_shared_count(int(config.get("n_shared_experts") or 0))
    writer.add_expert_weights_scale(float(config.get("routed_scaling_factor", 1.0)))
    writer.add_expert_weights_norm(bool(config.get("norm_topk_prob", False)))
    scoring = config.get("scoring_func", DEFAULT_GATING.get(config.get("model_type", "")))
    if scoring not in GATING:
        raise CheckpointError(f"DeepSeek's router scoring {scoring!r} is not supported; "
                              "softmax and sigmoid are.")
    writer.add_expert_gating_func(GATING[scoring])
    if (config.get("n_group") or 1) > 1:
        writer.add_expert_group_count(int(config["n_group"]))
        writer.add_expert_group_used_count(int(config["topk_group"]))


def _leading_dense(config: dict) -> int:
    """How many layers come before the first with experts: first_k_dense_replace, or the
    leading "dense" of GLM's mlp_layer_types (the others must all be "sparse")."""
    kinds = config.get("mlp_layer_types")
    if kinds is None:
        return int(config.get("first_k_dense_replace", 0))
    dense = next((i for i, kind in enumerate(kinds) if kind != "dense"), len(kinds))
    if any(kind != "sparse" for kind in kinds[dense:]):
        raise CheckpointError("This model's dense layers do not all come first; llama.cpp's "
                              "deepseek2 has experts on every layer after the leading ones.")
    return dense


def deepseek2_split(entry, config: dict) -> dict | None:
    """kv_b_proj -> attn_k_b (H, rank, nope) and attn_v_b (H, Dv, rank); the score
    correction under its GGUF name; layers past num_hidden_layers (multi-token prediction)
    dropped. GGUF name -> (shape, loader), or None for the usual mapping."""
    found = LAYER.search(entry.name)
    if found is None:
        return None
    layer = int(found.group(1))
    if layer >= config["num_hidden_layers"]:
        return {}
    if entry.name.endswith("mlp.gate.e_score_correction_bias"):
        return {f"blk.{layer}.exp_probs_b.bias": (entry.shape, entry.load)}
    if not entry.name.endswith("self_attn.kv_b_proj.weight"):
        return fused_experts_split(entry, config)
    heads, nope, value = (config["num_attention_heads"], config["qk_nope_head_dim"],
                          config["v_head_dim"])
    rank = entry.shape[-1]

    def per_head():
        return entry.load().reshape(heads, nope + value, rank)

    return {f"blk.{layer}.attn_k_b.weight": (
                (heads, rank, nope),
                lambda: np.ascontiguousarray(per_head()[:, :nope].transpose(0, 2, 1))),
            f"blk.{layer}.attn_v_b.weight": (
                (heads, value, rank), lambda: np.ascontiguousarray(per_head()[:, nope:]))}


def deepseek2_shape(name: str, h: Hyper, config: dict) -> tuple[int, ...] | None:
    base = name.split(".", 2)[-1] if name.startswith("blk.") else name
    rank, rotated = config["kv_lora_rank"], config["qk_rope_head_dim"]
    q_rank, heads = config.get("q_lora_rank"), h.heads
    own = {"attn_q.weight": (heads * h.head_dim, h.embd),
           "attn_q_a.weight": (q_rank, h.embd), "attn_q_a_norm.weight": (q_rank,),
           "attn_q_b.weight": (heads * h.head_dim, q_rank),
           "attn_kv_a_mqa.weight": (rank + rotated, h.embd), "attn_kv_a_norm.weight": (rank,),
           "attn_output.weight": (h.embd, heads * config["v_head_dim"])}
    return own[base] if base in own else expected_shape(name, h)
