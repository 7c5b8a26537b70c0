"""Model architectures, registered by their GGUF general.architecture name.

A model module defines a hyper-parameter dataclass read from GGUF metadata and a model
class whose weights bind by GGUF tensor name; contract.py says what the engine and the
loader call on it (TextModel). Projectors (images, audio) live in vision/ and audio/.
"""

from __future__ import annotations

from .contract import ARCHITECTURES, register  # noqa: F401  (the registry, here too)


def model_class(architecture: str, pooled: bool = False) -> type:
    """The class of a GGUF general.architecture (ValueError naming the known ones). pooled:
    the file declares a pooling type; a generative architecture's embedding variant, where
    one is registered as <architecture>_embed, reads it (Ollama's embeddinggemma files say
    gemma3 and a pooling type, as Ollama's engine tells them apart)."""
    if pooled and f"{architecture}_embed" in ARCHITECTURES:
        return ARCHITECTURES[f"{architecture}_embed"]
    return ARCHITECTURES[architecture]


# the modules register themselves
from . import (bert, deepseek2, gemma2, gemma3, gemma3n, gemma4, glm4,  # noqa: E402,F401
               gemma_embedding, gpt_oss, llama, llama4, mistral3, nomic, olmo, phi3,
               qwen, qwen35)
from . import granite, seed_oss, smollm3  # noqa: E402,F401
from . import command_r, starcoder2  # noqa: E402,F401
from . import glm4moelite  # noqa: E402,F401
from . import exaone4  # noqa: E402,F401
