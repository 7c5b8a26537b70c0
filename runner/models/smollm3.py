"""SmolLM3: a Llama block whose every fourth layer (3, 7, 11, ...) has no rope, a step that
llama.cpp's smollm3 fixes in code and reads from no key; those layers' cached keys stay as
they are in a context shift."""

from __future__ import annotations

from dataclasses import dataclass

from .contract import register
from .llama import Llama, LlamaConfig

NO_ROPE_STEP = 4


@dataclass
class SmolLM3Config(LlamaConfig):
    @classmethod
    def from_metadata(cls, meta: dict, arch: str = "smollm3") -> SmolLM3Config:
        base = LlamaConfig.from_metadata(meta, arch)
        rope_layers = tuple((i + 1) % NO_ROPE_STEP != 0 for i in range(base.layers))
        return cls(**{**vars(base), "rope_layers": rope_layers})


@register("smollm3")
class SmolLM3(Llama):
    config_class = SmolLM3Config
    config: SmolLM3Config
