"""What an image (or a clip of audio) becomes before its encoder, and how the text stream
holds the rows the encoder makes of it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# llama.cpp's KEY_FEATURE_LAYER: the hidden states a tower is read at (gguf-py names it not)
FEATURE_LAYER = "clip.vision.feature_layer"


@dataclass
class Pixels:
    """What an image (or a clip of audio) becomes before the encoder: its patches (audio:
    mel frames), the grid that shapes the graph, and any further inputs the graph reads."""
    patches: np.ndarray                  # float32 (P, C*p*p), each patch's pixels
    grid: tuple[int, int]                # patches per column and per row (height, width)
    rows: int                            # embedding rows the encoder makes of them
    inputs: dict[str, np.ndarray] = field(default_factory=dict)   # name -> int32 or float32
    # int32 (rows, 2): each row's row and column in the image, for a text model whose rope
    # reads positions in more than one dimension (multimodal/axes.py); None: not placed so
    spots: np.ndarray | None = None

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
