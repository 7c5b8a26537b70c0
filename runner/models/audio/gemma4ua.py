"""Gemma 4 12B's ("unified") audio, as llama.cpp's gemma4ua runs it: no encoder and no mel.
The 16 kHz samples are cut into frames of 640 (40 ms; the last padded with zeros), one
embedding row a frame: each frame's raw samples through an unweighted RMSNorm, then the
projection into the text model (mm.a.input_projection).
"""

from __future__ import annotations

from dataclasses import dataclass

import gguf
import numpy as np

from ...multimodal.sound import MAX_SAMPLES
from ..base import Metadata, ModelError, Weights
from ..contract import register_projector
from ..vision.pixels import Layout, Pixels

AUDIO = gguf.Keys.ClipAudio
FRAME = 640                     # samples a token, as llama.cpp fixes them
EPS = 1e-6                      # as llama.cpp fixes it


@dataclass(frozen=True)
class UnifiedAudioConfig:
    projection: int              # the text model's embedding width


@register_projector("gemma4ua")
class Gemma4UnifiedAudio:
    layout = Layout(before=["<|audio>"], after=["<audio|>"])
    max_rows = -(-MAX_SAMPLES // FRAME)

    def __init__(self, projection: int, weights: Weights):
        self.config = UnifiedAudioConfig(projection)
        self.input_projection = weights.take("mm.a.input_projection.weight",
                                             (projection, FRAME))

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights) -> "Gemma4UnifiedAudio":
        m = Metadata(meta, "clip")
        frame = int(m.get(AUDIO.NUM_MEL_BINS, FRAME))
        if frame != FRAME:
            raise ModelError(f"{AUDIO.NUM_MEL_BINS} is {frame}; gemma4ua reads frames of "
                             f"{FRAME} samples.")
        return cls(int(m.require(AUDIO.PROJECTION_DIM)), weights)

    def preprocess(self, samples: np.ndarray) -> Pixels:
        """At most 30 s of 16 kHz samples -> (frames, 640), the last zero-padded."""
        samples = np.asarray(samples, np.float32)[:MAX_SAMPLES]
        if samples.size == 0:
            raise ValueError("The audio has no samples to make a single row.")
        rows = -(-samples.size // FRAME)
        frames = np.zeros(rows * FRAME, np.float32)
        frames[:samples.size] = samples
        return Pixels(frames.reshape(rows, FRAME), (rows, 1), rows)

    def largest(self) -> Pixels:
        return self.preprocess(np.zeros(MAX_SAMPLES, np.float32))

    def forward(self, patches, grid: tuple[int, int], flash: bool = False):
        """patches (frames, 640) samples -> (frames, text embd)."""
        return self.input_projection.mul_mat(patches.rms_norm(EPS))          # (N, E)
