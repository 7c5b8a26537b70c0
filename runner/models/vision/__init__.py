"""Vision encoders ("projectors"): image -> embedding rows the text model reads in place of
tokens. Registered by llama.cpp's clip.projector_type, the key of its mmproj files (audio
encoders register here too, by clip.audio.projector_type). What the loader and the encoder
call on one is the Projector protocol of ../contract.py.
"""

from __future__ import annotations

from ..contract import PROJECTORS, register_projector  # noqa: F401  (the registry, here too)
from .pixels import FEATURE_LAYER, Layout, Pixels  # noqa: F401  (what the encoders share)


def projector_class(kind: str) -> type:
    """The class of a clip.projector_type (ValueError naming the known ones)."""
    return PROJECTORS[kind]


# the modules register themselves
from . import clip, gemma4uv, gemma4v, pixtral, qwen3_vl, qwen_vl, siglip  # noqa: E402,F401
