"""A batch: tokens of one or more sequences, each at its own position."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np

from pyggml.numpy_interop import in_range

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

FEW_ROWS = 64        # up to this many rows, a batch's runs are found in Python, not numpy


@dataclass
class Batch:
    tokens: np.ndarray          # int32 (T,)
    positions: np.ndarray       # int32 (T,)
    seqs: np.ndarray            # int32 (T,) sequence id of each token
    # given None, __post_init__ fills these two in (the last row; no image's)
    outputs: np.ndarray = field(default=cast(np.ndarray, None))  # int32 rows whose logits we want
    blocks: np.ndarray = field(default=cast(np.ndarray, None))   # int64 (T,): a row's image, or -1
    media: np.ndarray | None = None             # float32 (M, E): image rows' embeddings
    media_rows: np.ndarray | None = None        # int32 (M,): the rows they replace
    axes: np.ndarray | None = None              # int32 (axes, T): M-RoPE positions, where
                                                # images made them differ from positions

    if TYPE_CHECKING:       # what the constructor takes: __post_init__ makes the arrays
        def __init__(self, tokens: ArrayLike, positions: ArrayLike, seqs: ArrayLike,
                     outputs: ArrayLike | None = None, blocks: ArrayLike | None = None,
                     media: np.ndarray | None = None, media_rows: np.ndarray | None = None,
                     axes: np.ndarray | None = None) -> None: ...

    def __post_init__(self):
        self.tokens = np.asarray(self.tokens, dtype=np.int32)
        self.positions = np.asarray(self.positions, dtype=np.int32)
        self.seqs = np.asarray(self.seqs, dtype=np.int32)
        if self.outputs is None:
            self.outputs = np.array([len(self.tokens) - 1], dtype=np.int32)
        self.outputs = np.asarray(self.outputs, dtype=np.int32)
        n = len(self.tokens)
        self.blocks = np.full(n, -1, np.int64) if self.blocks is None else \
            np.asarray(self.blocks, dtype=np.int64)
        if n == 0:
            raise ValueError("A batch needs at least one token.")
        if self.positions.shape != (n,) or self.seqs.shape != (n,):
            raise ValueError(f"A batch of {n} tokens needs {n} positions and sequence ids, not "
                             f"{self.positions.shape} and {self.seqs.shape}.")
        if self.blocks.shape != (n,):
            raise ValueError(f"A batch of {n} tokens needs {n} block ids, not "
                             f"{self.blocks.shape}.")
        if self.media is not None and self.media.shape[0] != len(self.media_rows):
            raise ValueError(f"{len(self.media_rows)} media rows need as many embeddings, "
                             f"not {self.media.shape[0]}.")
        if self.outputs.size == 0 or not in_range(self.outputs, n):
            raise ValueError(f"Output indices must lie in [0, {n}), not {self.outputs.tolist()}.")

    @classmethod
    def of_sequence(cls, tokens, start: int, seq: int = 0, all_logits: bool = False) -> "Batch":
        n = len(tokens)
        return cls(tokens, np.arange(start, start + n), np.full(n, seq),
                   np.arange(n) if all_logits else None)

    def rope_positions(self, axes: int) -> np.ndarray:
        """int32 (axes * T,): each axis's positions in turn, as the model's rope reads them
        (without axes of its own, each of a token's axes is its position)."""
        if axes == 1:
            return self.positions
        if self.axes is not None:
            if self.axes.shape != (axes, len(self)):
                raise ValueError(f"A batch of {len(self)} tokens needs ({axes}, {len(self)}) "
                                 f"rope positions, not {self.axes.shape}.")
            return self.axes.ravel()
        return np.tile(self.positions, axes)

    @functools.cached_property
    def runs(self) -> list[tuple[int, int, int]]:
        """(sequence, first row, end row) of each run of one sequence's tokens, in order (a
        batch the loop assembles holds one run a sequence, a decode step's one token)."""
        seqs = self.seqs
        if len(seqs) <= FEW_ROWS:                # a few decode steps: Python's loop is quicker
            ids, found, start = seqs.tolist(), [], 0
            for row in range(1, len(ids) + 1):
                if row == len(ids) or ids[row] != ids[start]:
                    found.append((ids[start], start, row))
                    start = row
            return found
        if (seqs == seqs[0]).all():
            return [(int(seqs[0]), 0, len(seqs))]
        bounds = [0, *(np.flatnonzero(seqs[1:] != seqs[:-1]) + 1).tolist(), len(seqs)]
        return list(zip(seqs[bounds[:-1]].tolist(), bounds[:-1], bounds[1:]))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_media(self) -> int:
        return 0 if self.media_rows is None else len(self.media_rows)
