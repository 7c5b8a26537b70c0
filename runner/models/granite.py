"""Granite 3.x (granite) and Granite MoE (granitemoe, with or without a shared expert): a
Llama block whose token embeddings, sublayer outputs (before the residual adds them),
attention scores and logits are scaled by the file's multipliers (llama.py's Multipliers).
The logits are divided by logit_scale, computed as llama.cpp does (times its float32
inverse). Biases on every projection are optional, and experts replace the dense FFN where
the file has expert_count (llama.py). granite's rope.scaling.finetuned, true by default,
is llama.cpp's switch for rope: false, no layer rotates; granitemoe does not read it."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .contract import register
from .base import ATTENTION, LLM, ROPE, Metadata
from .llama import Llama, LlamaConfig, Multipliers


@dataclass
class GraniteConfig(LlamaConfig):
    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "granite") -> GraniteConfig:
        base, m = LlamaConfig.from_metadata(meta, arch), Metadata(meta, arch)
        logit_scale = m.require(LLM.LOGIT_SCALE)
        if logit_scale <= 0:
            raise m.malformed(LLM.LOGIT_SCALE, logit_scale, "not a positive number to divide "
                              "the logits by")
        multipliers = Multipliers(
            embedding=float(m.get(LLM.EMBEDDING_SCALE, 0.0)) or 1.0,
            residual=float(m.get(LLM.RESIDUAL_SCALE, 0.0)) or 1.0,
            attention=float(m.get(ATTENTION.SCALE, 0.0)),
            logits=float(np.float32(1) / np.float32(logit_scale)))
        ropes = m.get(ROPE.SCALING_FINETUNED, True) if ROPE_SWITCHED[arch] else True
        if not isinstance(ropes, bool):
            raise m.malformed(ROPE.SCALING_FINETUNED, ropes, "not a boolean (Granite's switch "
                              "for rope)")
        config = replace(base.with_experts(m), multipliers=multipliers,
                         rope_layers=None if ropes else (False,) * base.layers)
        return cls(**vars(config))


# the architectures whose rope.scaling.finetuned switches rope off (llama.cpp's granite;
# its granitemoe keeps rope on every layer)
ROPE_SWITCHED = {"granite": True, "granitemoe": False}


@register("granitemoe")
@register("granite")
class Granite(Llama):
    config_class = GraniteConfig
    config: GraniteConfig
