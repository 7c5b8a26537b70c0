"""Command R and R+ (CohereForCausalLM, GGUF command-r) and Command R7B and Command A
(Cohere2ForCausalLM, cohere2) checkpoints as llama.cpp's converter writes them: the common
keys, the LayerNorms' epsilon, logit_scale, no rope scaling, nothing permuted (transformers'
Cohere rotates interleaved pairs already). Command R's context is model_max_length where
config.json gives one (it was trained at 128k; max_position_embeddings says 8192). cohere2's
rotated dimensions are rotary_pct of each head (1.0 where config.json has none, as
transformers 5's configs have not), its window, and which layers slide, written as one bool
per layer from layer_types (llama.cpp reads that as well as its default of every fourth
layer global).

llama.cpp reads no output projection for either (it ties it to the token embeddings), and
no bias on the attention's output: a checkpoint with an untied lm_head or a non-zero output
bias is refused. Biases that are all zero are left out, as llama.cpp's converter leaves out
cohere2's; Q, K and V biases that are not are kept (llama.cpp's loader reads them)."""

from __future__ import annotations

from dataclasses import replace

import gguf
import numpy as np

from .checkpoint import CheckpointError
from .hyper import Hyper, expected_shape

SLIDING, FULL = "sliding_attention", "full_attention"
DEFAULT_SLIDING_PATTERN = 4          # transformers' and llama.cpp's: every fourth layer global


def command_r_hyper(config: dict, h: Hyper) -> Hyper:
    _check(config, h)
    return replace(h, context=config.get("model_max_length") or h.context)


def cohere2_hyper(config: dict, h: Hyper) -> Hyper:
    _check(config, h)
    return replace(h, rope_dims=int(config.get("rotary_pct", 1.0) * h.head_dim))


def _check(config: dict, h: Hyper) -> None:
    if not config.get("tie_word_embeddings", True):
        raise CheckpointError("This Cohere checkpoint has an output projection of its own "
                              "(tie_word_embeddings false); llama.cpp's Command R reads none "
                              "and multiplies by the token embeddings.")
    if h.heads * h.head_dim != h.embd:
        raise CheckpointError(f"This Cohere checkpoint's {h.heads} heads of {h.head_dim} do "
                              f"not make up its hidden size ({h.embd}), as llama.cpp's "
                              "projections need.")


def command_r_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    writer.add_layer_norm_eps(float(config.get("layer_norm_eps", 1e-5)))
    writer.add_logit_scale(float(config.get("logit_scale", 0.0625)))
    if h.rope_scaling is None:
        writer.add_rope_scaling_type(gguf.RopeScalingType.NONE)


def cohere2_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    command_r_hparams(writer, config, h, directory)
    n = config.get("sliding_window_pattern") or DEFAULT_SLIDING_PATTERN
    kinds = config.get("layer_types") or [FULL if (i + 1) % n == 0 else SLIDING
                                          for i in range(h.layers)]
    if len(kinds) != h.layers or not set(kinds) <= {SLIDING, FULL}:
        raise CheckpointError(f"config.json's layer_types must name {SLIDING} or {FULL} "
                              f"for each of the {h.layers} layers.")
    writer.add_sliding_window(int(config["sliding_window"]))
    writer.add_sliding_window_pattern([kind == SLIDING for kind in kinds])


def cohere_split(entry, config: dict) -> dict | None:
    """The tied lm_head and zero biases left out; a non-zero bias on the attention's
    output refused."""
    if entry.name == "lm_head.weight":
        return {}
    if not entry.name.endswith(".bias"):
        return None
    if not np.any(entry.load()):
        return {}
    if ".o_proj." in entry.name:
        raise CheckpointError(f"The tensor {entry.name} is a bias on the attention's output, "
                              "which llama.cpp's Command R does not read.")
    return None


def cohere_shape(name: str, h: Hyper, config: dict) -> tuple[int, ...] | None:
    """Command R+'s Q and K norms hold a weight per head."""
    assert isinstance(h.kv_heads, int)
    if name.endswith("attn_q_norm.weight"):
        return (h.heads, h.head_dim)
    if name.endswith("attn_k_norm.weight"):
        return (h.kv_heads, h.head_dim)
    return expected_shape(name, h)
