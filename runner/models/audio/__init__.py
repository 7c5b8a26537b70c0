"""Audio encoders: 16 kHz samples -> embedding rows the text model reads in place of tokens,
registered with the vision projectors by llama.cpp's clip.audio.projector_type. Their
preprocess takes samples (sound.decode's) where an image projector's takes an image, and
gives the same Pixels: mel frames as patches, and the further inputs the graph reads.
"""

from __future__ import annotations

# the modules register themselves
from . import gemma4a, gemma4ua  # noqa: F401
