"""Model architectures, registered by their GGUF general.architecture name.

A model module defines a hyper-parameter dataclass read from GGUF metadata and a model
class whose weights bind by GGUF tensor name. The model contract (see base.py):
`forward(ctx, inputs, kv) -> logits`, `cache_layers()`, `windows()`, `shift(...)`.
"""

from __future__ import annotations

REGISTRY: dict[str, type] = {}


def register(architecture: str):
    def add(cls):
        if architecture in REGISTRY:
            raise ValueError(f"The architecture {architecture!r} is registered twice "
                             f"({REGISTRY[architecture].__name__} and {cls.__name__}).")
        REGISTRY[architecture] = cls
        return cls

    return add


def model_class(architecture: str) -> type:
    try:
        return REGISTRY[architecture]
    except KeyError:
        raise ValueError(f"Unknown architecture {architecture!r}; this runner knows "
                         f"{', '.join(sorted(REGISTRY))}.") from None


# the modules register themselves
from . import bert, gemma3, gemma4, llama, llama4, qwen  # noqa: E402,F401
