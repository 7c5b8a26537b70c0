"""GLM-4 and GLM-4-0414 checkpoints (Glm4ForCausalLM) as llama.cpp's converter writes them:
the common keys, with the rotated dimensions partial_rotary_factor of each head (half where
the config says nothing, as transformers and llama.cpp take it). Q, K and V stay apart with
their biases, the FFN's gate and up one tensor (ffn_up) as the checkpoint holds them; no
permutation (transformers' GLM rotates interleaved pairs, llama.cpp's NORM rope)."""

from __future__ import annotations

from dataclasses import replace

from .checkpoint import CheckpointError
from .hyper import Hyper

DEFAULT_PARTIAL_ROTARY = 0.5


def glm4_hyper(config: dict, h: Hyper) -> Hyper:
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if "mrope_section" in rope:
        raise CheckpointError("GLM-4 with M-RoPE sections (GLM-4V's text model) is not "
                              "supported.")
    partial = rope.get("partial_rotary_factor",
                       config.get("partial_rotary_factor", DEFAULT_PARTIAL_ROTARY))
    return replace(h, rope_dims=int(h.head_dim * partial))
