"""Open a GGUF model: metadata, architecture, tokenizer, and the model bound to its weights.

open_model binds the model to tensors that have no memory yet, so that placement.py can
decide from the model's own use of each weight where it goes; load() places and fills them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import pyggml

from ..engine.pooling import pooling_of
from ..models import (
    audio,  # noqa: F401  (registers the audio projectors)
    model_class,
)
from ..models.base import Weights
from ..models.contract import Projector, TextModel
from ..models.vision import ollama, projector_class
from ..tokenizer import Tokenizer, from_metadata
from . import store
from .placement import Placement, Placer

# a model without its own output matrix multiplies by the embeddings: give it an alias, so
# that (as in llama.cpp) the product can use a repacked copy, or the output layer's device,
# while lookups read the original on the CPU
TIED = {"output.weight": "token_embd.weight"}


class _Projection(Protocol):
    projection: int                    # the width of its rows (where it sets no row_width)


class _ConfiguredProjector(Projector, Protocol):
    """A projector as _attach reads it: every one has a config saying its rows' width."""
    config: _Projection

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights) -> _ConfiguredProjector: ...


@dataclass
class Loaded:
    path: str
    metadata: dict
    architecture: str
    model: TextModel
    tokenizer: Tokenizer
    file: pyggml.GGUFFile
    tensors: dict[str, pyggml.Tensor]
    # the encoders of its projector file, by the media they take ("image", "audio")
    projectors: dict[str, Projector] = field(default_factory=dict)
    projector_file: pyggml.GGUFFile | None = None
    projector_tensors: dict[str, pyggml.Tensor] | None = None
    unread: str | None = None          # why the file's own tower is not read, if it is not

    @property
    def pooling(self) -> str | None:
        return pooling_of(self.metadata)

    def load(self, placement: Placement, progress=None, use_mmap: bool = True) -> None:
        """Give every weight the memory placement chose for it, and fill it."""
        self.file.place(self.tensors, placement.memory.__getitem__, progress, use_mmap)

    def load_projector(self, device: pyggml.Device, use_mmap: bool = True) -> None:
        """The projectors' weights, all in device's memory."""
        memory = device.buffer_type()
        assert self.projector_file is not None        # called where projectors were attached
        self.projector_file.place(self.projector_tensors, lambda name: memory, None, use_mmap)

    def close(self) -> None:
        self.file.close()
        if self.projector_file is not None:
            self.projector_file.close()      # the model's own file too, for an Ollama file


def open_model(name_or_path, pull: bool = False, projector=None) -> Loaded:
    """pull: a known model name that is not in the store is pulled first. projector: an
    mmproj GGUF file (llama.cpp's) with the model's vision encoder; without one, a vision
    tower inside the model's file (Ollama's single files) is read."""
    path = store.resolve(name_or_path, pull_missing=pull)
    gguf_file = pyggml.GGUFFile(path)
    meta = gguf_file.metadata
    model, bound = bind_text_model(gguf_file)
    tokenizer = from_metadata(meta)
    loaded = Loaded(str(path), meta, meta["general.architecture"], model, tokenizer, gguf_file,
                    bound)
    if projector is not None:
        projector_file = pyggml.GGUFFile(projector)
        _attach(loaded, projector_file, projector_file.metadata, projector_file.tensors(),
                projector)
    elif ollama.unread_tower(meta):
        loaded.unread = ollama.unread_tower(meta)
    elif ollama.has_vision(meta) or ollama.has_audio(meta):
        clip, names = ollama.as_mmproj(meta, gguf_file.tensors_info)
        found = gguf_file.tensors()                      # the towers' own, renamed
        _attach(loaded, gguf_file, clip, {new: found[old] for new, old in names.items()}, path)
    return loaded


def bind_text_model(gguf_file: pyggml.GGUFFile) -> tuple[TextModel, dict[str, pyggml.Tensor]]:
    """The file's text model bound to its tensors, which have no memory yet, and the tensors
    it took. A ValueError with a sentence for any file it cannot be: one that names no
    architecture or one this runner does not know (naming the known ones), metadata that
    is malformed or disagrees with the tensors (ModelError, naming the key)."""
    meta = gguf_file.metadata
    architecture = meta.get("general.architecture")
    if not isinstance(architecture, str):
        raise ValueError(f"{gguf_file.path} does not name its architecture "
                         "(general.architecture).")
    cls: type[TextModel] = model_class(architecture, pooling_of(meta) is not None)
    weights = Weights(gguf_file.tensors(aliases=TIED))
    model = cls.from_metadata(meta, weights)
    return model, {name: t for name, t in weights.tensors.items() if name in weights.taken}


# modality -> the key saying an mmproj file has its encoder, and its projector type's key
MODALITIES = {"image": ("clip.has_vision_encoder", "clip.vision.projector_type"),
              "audio": ("clip.has_audio_encoder", "clip.audio.projector_type")}


def _attach(loaded: Loaded, projector_file: pyggml.GGUFFile, meta: dict, tensors: dict,
            where) -> None:
    """Bind the image and audio projectors that meta describes to tensors (of
    projector_file)."""
    present = [m for m, (has, _) in MODALITIES.items() if meta.get(has)]
    if meta.get("general.architecture") != "clip" or not present:
        raise ValueError(f"{where} is not a projector (an mmproj file with a vision or audio "
                         "encoder, general.architecture clip).")
    weights = Weights(tensors, reader=projector_file.read)
    for modality in present:
        kind = meta.get(MODALITIES[modality][1]) or meta.get("clip.projector_type")
        if kind is None:
            raise ValueError(f"The projector {where} does not name its {modality} projector "
                             f"type ({MODALITIES[modality][1]}).")
        cls: type[_ConfiguredProjector] = projector_class(kind)
        projector = cls.from_metadata(meta, weights)
        width = getattr(projector, "row_width", projector.config.projection)
        embd = loaded.model.media_width()
        if width != embd:
            raise ValueError(f"The projector {where} makes {modality} rows {width} wide, but "
                             f"the text model reads rows {embd} wide: they do not belong "
                             "together.")
        loaded.projectors[modality] = projector
    loaded.projector_file = projector_file
    loaded.projector_tensors = {t.name: t for name, t in weights.tensors.items()
                                if name in weights.taken}         # by their names in the file


def load_model(name_or_path, backend: pyggml.Backend | None = None, progress=None,
               repack: bool = True) -> Loaded:
    """The whole model on one device (the CPU by default). repack: weights that feed matrix
    products take the CPU's repacked layouts where it has them (llama.cpp's default; its
    results differ slightly from the plain layout)."""
    loaded = open_model(name_or_path)
    device = (backend or pyggml.cpu_backend()).device
    with Placer(loaded.model, loaded.tensors, loaded.pooling is not None) as placer:
        placement = placer.place([device] * (loaded.model.config.layers + 1), repack)
    loaded.load(placement, progress)
    return loaded
