"""Mistral 3 (Ministral 3, Mistral Small 3.x, Magistral, Devstral): a Llama block with YaRN
rope, whose queries are scaled by Llama 4's attention temperature past its original context:
1 + beta * ln(1 + floor(position / original context)), beta the file's
attention.temperature_scale (transformers' llama_4_scaling_beta)."""

from __future__ import annotations

from dataclasses import dataclass

from .contract import register
from .attention import temperature
from .base import ATTENTION, ROPE, Metadata
from .llama import Llama, LlamaConfig


@dataclass
class Mistral3Config(LlamaConfig):
    temperature_scale: float = 0.0      # 0: queries unscaled
    temperature_length: int = 0         # positions per step of the temperature

    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "mistral3") -> Mistral3Config:
        base, m = LlamaConfig.from_metadata(meta, arch), Metadata(meta, arch)
        length = m.get(ATTENTION.TEMPERATURE_LENGTH) or m.get(ROPE.SCALING_ORIG_CTX_LEN) or \
            base.context
        return cls(**vars(base), temperature_scale=float(m.get(ATTENTION.TEMPERATURE_SCALE, 0.0)),
                   temperature_length=int(length))


@register("mistral3")
class Mistral3(Llama):
    config_class = Mistral3Config
    config: Mistral3Config

    def _queries(self, q, inputs):
        c = self.config
        if not c.temperature_scale:
            return q
        return q.mul(temperature(inputs.positions, inputs.n_tokens, c.temperature_length,
                                 c.temperature_scale))                       # (T, H, D)
