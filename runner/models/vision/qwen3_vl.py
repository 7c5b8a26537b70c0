"""Qwen3-VL's vision (qwen3vl_merger; Qwen3.5's tower is the same): Qwen2-VL's tower
(qwen_vl.py: smart resize, patches of 16 as temporal pairs in merge order, 2-D vision rope,
no windows) with

- a bias on the patch embedding and learned positions: a square table (v.position_embd,
  side x side) resampled bilinearly, corners aligned, to the image's patch grid; each patch
  reads four taps of it, weighted, as transformers' interpolation indices and weights;
- LayerNorm blocks with Q, K and V in one product and a tanh-GELU MLP;
- deepstack: after some blocks (clip.vision.is_deepstack_layers), a merger of their own (a
  LayerNorm over each cell's patches side by side, two linears with an exact GELU between)
  makes one more set of rows. An image's row is the main merger's row followed by each
  deepstack row (text embd x (1 + deepstack) floats, as llama.cpp's mtmd lays it out); the
  text model adds the j-th to its j-th layer's output at the image's rows (models/qwen.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gguf
import numpy as np

from ..contract import register_projector
from .pixels import Pixels
from ..base import Block, Metadata, ModelError, Weights, weight
from .qwen_vl import DEFAULT_MERGE, QwenVision, file_pixels, linear, merge_order, tower_config
from .vit import ViTConfig, layer_norm

if TYPE_CHECKING:
    from pyggml import Tensor

VISION = gguf.Keys.ClipVision
TAPS = 4                                # bilinear: two rows of the table by two columns


@dataclass
class DeepstackMerger(Block):
    """v.deepstack.N: a block's own merger (LayerNorm over the merged cell, fc1, GELU, fc2)."""
    norm: Tensor = weight()
    norm_b: Tensor = weight()
    fc1: Tensor = weight()
    fc1_b: Tensor = weight()
    fc2: Tensor = weight()
    fc2_b: Tensor = weight()


def bilinear_taps(rows: np.ndarray, cols: np.ndarray, grid: tuple[int, int],
                  side: int) -> tuple[np.ndarray, np.ndarray]:
    """Each patch's four taps into a side x side table and their weights, resampling it to
    grid (rows, columns of patches) with corners aligned, as transformers computes them
    (float32): int32 and float32 (TAPS, P)."""
    axes = []
    for index, size in ((rows, grid[0]), (cols, grid[1])):
        source = index.astype(np.float32) * np.float32(side - 1) / np.float32(max(size - 1, 1))
        floor = np.floor(source)
        near = np.clip(floor.astype(np.int64)[:, None] + np.arange(2), 0, side - 1)   # (P, 2)
        weight = np.clip(1 - np.abs(source[:, None] - floor[:, None] - np.arange(2)), 0, None)
        axes.append((near, weight.astype(np.float32)))
    (row_taps, row_weights), (col_taps, col_weights) = axes
    taps = (row_taps[:, :, None] * side + col_taps[:, None, :]).reshape(-1, TAPS)
    weights = (row_weights[:, :, None] * col_weights[:, None, :]).reshape(-1, TAPS)
    return np.ascontiguousarray(taps.T, np.int32), np.ascontiguousarray(weights.T)


@register_projector("qwen3vl_merger")
class Qwen3Vision(QwenVision):
    def __init__(self, config: ViTConfig, weights: Weights, merge: int = DEFAULT_MERGE,
                 deepstack=(), pixels: tuple[int, int] | None = None):
        """deepstack: the blocks after which a deepstack merger reads the patches."""
        super().__init__(config, weights, merge, pixels=pixels)
        c, cell = config, config.embd * merge * merge
        self.patch_bias = weights.take("v.patch_embd.bias", (c.embd,))
        table = weights.tensors.get("v.position_embd.weight")
        count = table.shape[0] if table is not None else 0
        self.side = math.isqrt(count)
        if self.side * self.side != count or not count:
            raise ModelError("v.position_embd.weight must hold a square grid of positions, "
                             f"not {count}.")
        self.position_embd = weights.take("v.position_embd.weight", (count, c.embd))
        self.deepstack = {}
        shapes = {"norm": (cell,), "fc1": (cell, cell), "fc2": (c.projection, cell)}
        for i in sorted(deepstack):
            merger = self.deepstack[i] = DeepstackMerger()
            for name, shape in shapes.items():
                setattr(merger, name, weights.take(f"v.deepstack.{i}.{name}.weight", shape))
                setattr(merger, f"{name}_b", weights.take(f"v.deepstack.{i}.{name}.bias",
                                                          shape[:1]))

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights) -> "Qwen3Vision":
        m, config = Metadata(meta, "clip"), tower_config(meta, weights)
        if config.head_dim % 4:
            raise ModelError(f"A head of {config.head_dim} cannot be split into row and "
                             "column halves of pairs.")
        merge = int(m.get(VISION.SPATIAL_MERGE_SIZE, DEFAULT_MERGE))
        marked = list(m.get(VISION.IS_DEEPSTACK_LAYERS, []))
        return cls(config, weights, merge, [i for i, deep in enumerate(marked) if deep],
                   file_pixels(m, config, merge))

    @property
    def row_width(self) -> int:
        """Floats in each row: the main merger's and each deepstack merger's."""
        return self.config.projection * (1 + len(self.deepstack))

    def preprocess(self, image) -> Pixels:
        pixels = super().preprocess(image)
        rows, cols = pixels.grid
        ys, xs = np.divmod(merge_order(rows, cols, self.merge), cols)
        taps, weights = bilinear_taps(ys, xs, pixels.grid, self.side)
        pixels.inputs.update(taps=taps.ravel(), tap_weights=weights.ravel())
        return pixels

    # each projector's forward takes its own Pixels.inputs by name (contract.Projector):
    # Qwen3-VL's taps in place of Qwen2.5-VL's windows
    def forward(self, patches, grid: tuple[int, int], positions,  # type: ignore[override]
                taps, tap_weights, flash: bool = False):
        """patches (P, 3*p*p) in merge order, positions int32 (4 * P,), taps int32 and
        tap_weights float32 (TAPS * P,) -> (P / merge^2, text embd x (1 + deepstack))."""
        n, d = patches.shape[0], self.config.embd
        x = self._embed(patches).add(self.patch_bias)                         # (P, D)
        table = patches.context.bind(self.position_embd).get_rows(taps)      # (TAPS * P, D)
        weighted = table.reshape(TAPS, n, d).mul(tap_weights.reshape(TAPS, n, 1))
        for tap in range(TAPS):
            x = x.add(weighted.view((n, d), tap * weighted.strides[0]))
        features = []
        for i, block in enumerate(self.blocks):
            x = self._block(x, block, positions, None, flash)
            if i in self.deepstack:
                features.append(self._deepstack_rows(x, self.deepstack[i]))
        rows = self._merged(x)                                                # (L, E)
        for feature in features:
            rows = rows.concat(feature, axis=1)
        return rows

    def _deepstack_rows(self, x, merger: DeepstackMerger):
        """x (P, D), a block's output -> (P / merge^2, E): its merger's rows."""
        cell = self.merge * self.merge
        h = layer_norm(x.reshape(x.shape[0] // cell, x.shape[1] * cell), merger.norm,
                       merger.norm_b, self.config.eps)
        return linear(merger.fc2, merger.fc2_b, linear(merger.fc1, merger.fc1_b, h).gelu_erf())
