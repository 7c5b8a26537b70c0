"""config.json's sizes checked against the tensors the checkpoint holds, before anything is
built from them: the converter makes lists per layer and per token, and a config that says
10**9 layers or 10**12 tokens over a checkpoint of two layers and 600 tokens would have it
allocate without end. Each size is a whole number (a count of layers no more than the
layers the tensors hold, a width no more than their largest dimension), each float a finite
number, each section an object; a refusal names the key.

The keys are the ones the converter reads, at any depth (text_config, vision_config,
rope_parameters ...), so a nested tower's sizes are bounded as the text model's are."""

from __future__ import annotations

import math
import re

from .checkpoint import CheckpointError

# counts of layers: no more than the layers the tensors hold
LAYER_COUNTS = ("num_hidden_layers", "num_layers", "n_layer", "depth", "num_kv_shared_layers",
                "first_k_dense_replace", "num_nextn_predict_layers", "mtp_num_hidden_layers")
# widths, heads, experts and the vocabulary: no more than the tensors' largest dimension
# (or their number, which bounds experts held one tensor each)
WIDTHS = ("hidden_size", "intermediate_size", "moe_intermediate_size", "intermediate_size_mlp",
          "shared_expert_intermediate_size", "head_dim", "global_head_dim",
          "num_attention_heads", "num_key_value_heads", "num_global_key_value_heads",
          "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
          "vocab_size", "vocab_size_per_layer_input", "hidden_size_per_layer_input",
          "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
          "linear_value_head_dim", "linear_conv_kernel_dim", "num_experts", "num_local_experts",
          "n_routed_experts", "num_experts_per_tok", "top_k_experts", "moe_top_k",
          "n_shared_experts", "n_group", "topk_group", "altup_num_inputs", "altup_active_idx",
          "laurel_rank", "type_vocab_size", "n_embd", "n_head", "n_inner", "num_heads",
          "embed_dim", "out_hidden_size", "patch_size")
# sizes that must be at least one: the converter divides by them or steps by them
POSITIVE = ("num_hidden_layers", "hidden_size", "vocab_size", "num_attention_heads",
            "full_attention_interval", "no_rope_layer_interval", "interleave_moe_layer_step",
            "decoder_sparse_step", "moe_every_n_layers")
# other whole numbers GGUF records as 32-bit: positions, windows, chunks
RECORDED = ("max_position_embeddings", "original_max_position_embeddings", "sliding_window",
            "attention_chunk_size", "floor_scale", "n_positions", "max_trained_positions",
            "full_attention_interval", "no_rope_layer_interval", "interleave_moe_layer_step",
            "decoder_sparse_step", "moe_every_n_layers")
LARGEST_RECORDED = 2**32 - 1
# token ids, one or a list (eos_token_id): whole numbers GGUF records as 32-bit
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "unk_token_id",
             "decoder_start_token_id")
FLOATS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "rope_theta",
          "rope_local_base_freq", "partial_rotary_factor", "factor", "beta_fast", "beta_slow",
          "attention_factor", "low_freq_factor", "high_freq_factor", "mscale", "mscale_all_dim",
          "final_logit_softcapping", "attn_logit_softcapping", "routed_scaling_factor",
          "attn_scale", "llama_4_scaling_beta", "query_pre_attn_scalar", "swiglu_alpha",
          "swiglu_limit", "rotary_emb_fraction", "rotary_emb_base")
SECTIONS = ("text_config", "vision_config", "audio_config", "rope_parameters", "rope_scaling",
            "per_layer_config", "quantization_config")
NAMES = ("model_type",)
LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers?|h|blocks?)\.(\d+)\.")


def check_sizes(config: dict, tensors: dict, file: str = "config.json") -> None:
    """Refuse config, file's (CheckpointError naming the key), where a value is of the
    wrong kind or a size is more than the tensors (name -> entry with .shape) can hold."""
    layers = layers_held(tensors)
    widest = max([len(tensors), *(n for entry in tensors.values() for n in entry.shape)])
    _check(config, f"{file}'s ", layers, widest)


def layers_held(tensors: dict) -> int:
    """The layers the tensors hold (the highest index of a layer's tensor, plus one), else
    the number of tensors (each layer holds one at least)."""
    indices = [int(found.group(1)) for name in tensors
               if (found := LAYER_INDEX.search(name)) is not None]
    return max(indices) + 1 if indices else len(tensors)


def _check(config: dict, where: str, layers: int, widest: int) -> None:
    for key, value in config.items():
        path = f"{where}{key}"
        if isinstance(value, dict):
            _check(value, f"{path}.", layers, widest)
        elif key in SECTIONS and value is not None:
            raise CheckpointError(f"{path} is {_shown(value)}; an object was "
                                  "expected.")
        if value is None or isinstance(value, dict):
            continue
        if key in NAMES and not isinstance(value, str):
            raise CheckpointError(f"{path} is {_shown(value)}; a name was "
                                  "expected.")
        if key in FLOATS:
            _check_float(path, value)
        if key in LAYER_COUNTS:
            _check_whole(path, value, layers, f"the {layers} layers the checkpoint's tensors "
                                              "hold")
        if key in WIDTHS:
            for each in value if isinstance(value, list) else [value]:     # per layer
                _check_whole(path, each, widest, f"the largest dimension of the checkpoint's "
                                                 f"tensors, {widest}")
        if key in RECORDED:
            _check_whole(path, value, LARGEST_RECORDED, "what GGUF records, 2**32 - 1")
        if key in TOKEN_IDS:
            for each in value if isinstance(value, list) else [value]:
                _check_whole(path, each, LARGEST_RECORDED, "what GGUF records, 2**32 - 1")
        if key in POSITIVE and value == 0:
            raise CheckpointError(f"{path} is 0; it must be at least 1.")


def _check_whole(path: str, value, bound: int, bound_is: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CheckpointError(f"{path} is {_shown(value)}; a whole number of "
                              "at least 0 was expected.")
    if value > bound:
        raise CheckpointError(f"{path} is {value}, more than {bound_is}.")


def _check_float(path: str, value) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or \
            not math.isfinite(value):
        raise CheckpointError(f"{path} is {_shown(value)}; a finite number was "
                              "expected.")


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
