"""Vision encoders ("projectors"): image -> embedding rows the text model reads in place of
tokens. Registered by llama.cpp's clip.projector_type, the key of its mmproj files.

A projector class has:
- `from_metadata(meta, weights)`: its hyper-parameters (clip.vision.* keys) and weights bound
  by mmproj tensor name (v.*, mm.*);
- `preprocess(image) -> Pixels`: a decoded RGB image to the arrays its graph reads, as the
  family's reference processor makes them, and how many embedding rows they become;
- `forward(inputs) -> Tensor (rows, text embd)`: the encoder graph over a PixelInputs;
- `layout`: the token texts around the rows in the prompt (looked up in the text vocab),
  and whether the text model's image rows attend to each other both ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PROJECTORS: dict[str, type] = {}
# llama.cpp's KEY_FEATURE_LAYER: the hidden states a tower is read at (gguf-py names it not)
FEATURE_LAYER = "clip.vision.feature_layer"


def register_projector(kind: str):
    def add(cls):
        if kind in PROJECTORS:
            raise ValueError(f"The projector type {kind!r} is registered twice.")
        PROJECTORS[kind] = cls
        return cls

    return add


def projector_class(kind: str) -> type:
    try:
        return PROJECTORS[kind]
    except KeyError:
        raise ValueError(f"Unknown vision projector type {kind!r}; this runner knows "
                         f"{', '.join(sorted(PROJECTORS))}.") from None


@dataclass
class Pixels:
    """What an image (or a clip of audio) becomes before the encoder: its patches (audio:
    mel frames), the grid that shapes the graph, and any further inputs the graph reads."""
    patches: np.ndarray                  # float32 (P, C*p*p), each patch's pixels
    grid: tuple[int, int]                # patches per column and per row (height, width)
    rows: int                            # embedding rows the encoder makes of them
    inputs: dict[str, np.ndarray] = field(default_factory=dict)   # name -> int32 or float32

    @property
    def key(self) -> tuple:
        """What decides the encoder graph's shape."""
        return (self.patches.shape, self.grid)


@dataclass
class Layout:
    """How the text stream holds an image's rows: token texts before and after them, and
    whether the rows of one image attend to each other both ways in the text model."""
    before: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)
    bidirectional: bool = False


# the modules register themselves
from . import clip, gemma4v, siglip  # noqa: E402,F401
