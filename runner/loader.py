"""Open a GGUF model: metadata, architecture, weights on a backend, tokenizer."""

from __future__ import annotations

from dataclasses import dataclass

import pyggml

from . import store
from .models import model_class
from .models.base import Weights
from .tokenizer import Tokenizer, from_metadata


@dataclass
class Loaded:
    path: str
    metadata: dict
    architecture: str
    model: object
    tokenizer: Tokenizer
    file: pyggml.GGUFFile


# tensors read by lookup (get_rows) rather than matrix products: never repacked
LOOKUPS = {"token_embd.weight"}
# a model without its own output matrix multiplies by the embeddings: give it an alias, so
# that (as in llama.cpp) the product can use a repacked copy while lookups read the original
TIED = {"output.weight": "token_embd.weight"}


def load_model(name_or_path, backend: pyggml.Backend, progress=None,
               repack: bool = True) -> Loaded:
    """repack: give weights that feed matrix products the CPU's repacked layouts where it
    has them (llama.cpp's default; its results differ slightly from the plain layout)."""
    path = store.resolve(name_or_path)
    gguf_file = pyggml.GGUFFile(path)
    meta = gguf_file.metadata
    architecture = meta.get("general.architecture")
    if architecture is None:
        raise ValueError(f"{path} does not name its architecture (general.architecture).")
    cls = model_class(architecture)                      # unknown: lists the known ones
    tokenizer = from_metadata(meta)
    weights = Weights(gguf_file.load(
        backend, progress=progress, repack=(lambda name: name not in LOOKUPS) if repack else None,
        aliases=TIED if repack else None))
    model = cls.from_metadata(meta, weights)
    return Loaded(str(path), meta, architecture, model, tokenizer, gguf_file)
