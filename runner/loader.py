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


def load_model(name_or_path, backend: pyggml.Backend, progress=None) -> Loaded:
    path = store.resolve(name_or_path)
    gguf_file = pyggml.GGUFFile(path)
    meta = gguf_file.metadata
    architecture = meta.get("general.architecture")
    if architecture is None:
        raise ValueError(f"{path} does not name its architecture (general.architecture).")
    cls = model_class(architecture)                      # unknown: lists the known ones
    tokenizer = from_metadata(meta)
    weights = Weights(gguf_file.load(backend, progress=progress))
    model = cls.from_metadata(meta, weights)
    return Loaded(str(path), meta, architecture, model, tokenizer, gguf_file)
