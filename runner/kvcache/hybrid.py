"""A hybrid cache: KV cells for a model's attention layers (causal.py) and recurrent states
for its recurrent layers (states.py), one object the engine drives as it drives a KV cache.

A layer whose LayerShape carries a StateShape keeps no keys or values: per state cell it
keeps a convolution state (its last kernel - 1 inputs, channel by channel) and a recurrent
state, float32, on the device that computes the layer. Runner side, what differs from a
KV cache follows from a recurrence's nature: a sequence resumes only at a position it holds
a state of (rollback_point()), a range cannot be dropped from its middle (a context shift
evaluates the kept tokens again), a fork shares the state cell. checkpoint(seq, position)
keeps the state a batch ended with.

Model side (HybridView), each recurrent layer of a graph: for each group of the batch's
sequences that bring as many tokens each (a batch of decode steps is one group; a prompt
chunk beside them another), rows(x, group) gathers their rows (S, t, ...), conv_state()
and recurrent_state() read their states, write_conv() and write_recurrent() store the new
ones, and join() puts the groups' outputs back in the batch's row order. Each group is one
call of ggml's recurrent ops, exact for every sequence whatever the others bring.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

import pyggml

from .causal import CacheAllocationError, CausalCache
from .graph_view import GraphView, Placement
from .states import StateCells

if TYPE_CHECKING:
    from ..engine.batch import Batch

DEFAULT_CHECKPOINTS = 4      # per sequence, where the KV budget (default_checkpoints) allows
MIN_CHECKPOINTS = 2          # before a turn's generation prompt, and where its reply ended
ROW_FLOATS = 4096            # states move in rows of at most this many floats (see pieces())
# each graph input's index type: cells read (GET_ROWS), written (SET_ROWS), rows gathered
INDEX_TYPES = {"src": ("I32", np.int32), "dst": ("I64", np.int64), "rows": ("I32", np.int32)}


def pieces(floats: int) -> int:
    """The rows a state of floats is read and written in: ggml copies each row of a
    GET_ROWS or SET_ROWS on one thread, so one state in one row would take one core's
    bandwidth; cut into rows (of floats' largest power-of-two divisor up to ROW_FLOATS,
    at least 256 floats), every thread copies a share."""
    length = math.gcd(floats, ROW_FLOATS)
    return floats // length if length >= 256 else 1


@dataclass(frozen=True)
class StateShape:
    """A recurrent layer's state, in floats: the convolution's (channels, kernel - 1) and
    the recurrence's (heads, D, D for a DeltaNet)."""
    conv_channels: int
    conv_width: int              # kernel - 1
    recurrent: int

    @property
    def conv(self) -> int:
        return self.conv_channels * self.conv_width

    @property
    def nbytes(self) -> int:
        return 4 * (self.conv + self.recurrent)


@dataclass
class HybridPlacement(Placement):
    """A Placement with each run's state cells: read from sources, written to targets, and
    the runs grouped by their token count (each group (tokens, run indices))."""
    sources: tuple[int, ...] = ()
    targets: tuple[int, ...] = ()
    state_groups: tuple[tuple[int, list[int]], ...] = ()

    @property
    def shape(self) -> tuple:
        return (*super().shape, tuple((t, len(runs)) for t, runs in self.state_groups),
                self.in_order)

    @functools.cached_property
    def in_order(self) -> bool:
        """Whether the groups' rows, one after the other, are the batch's rows in order."""
        order = [i for _, runs in self.state_groups for i in runs]
        return order == sorted(order)


def default_checkpoints(layers, cells: int, sequences: int) -> int:
    """The checkpoints each sequence keeps by default: as many as DEFAULT_CHECKPOINTS where
    their bytes stay under the KV cache's (its attention layers' keys and values at
    cells), at least MIN_CHECKPOINTS."""
    kv_bytes = sum(2 * 2 * s.kv_heads * s.head_dim for s in layers if s.state is None) * cells
    state_bytes = sum(s.state.nbytes for s in layers if s.state is not None)
    if not state_bytes:
        return 0
    return max(MIN_CHECKPOINTS, min(DEFAULT_CHECKPOINTS,
                                    kv_bytes // (state_bytes * max(sequences, 1))))


class HybridCache(CausalCache):
    drops_ranges = False

    def __init__(self, layers, cells: int, backends, cache_type: str = "f16",
                 flash: bool = False, allocate: bool = True, window_cells=None,
                 sequences: int = 1, checkpoints: int | None = None):
        super().__init__(layers, cells, backends, cache_type, flash, allocate=False,
                         window_cells=window_cells)
        if checkpoints is None:
            checkpoints = default_checkpoints(layers, cells, sequences)
        self.states = StateCells(sequences, checkpoints)
        recurrent = [i for i, s in enumerate(layers) if s.state is not None]
        self.state_storage = pyggml.Context(max_tensors=2 * len(recurrent) + 1, graphs=0)
        # per layer (None: an attention layer's), (state cells, floats) each
        self.conv: list[pyggml.Tensor | None] = [None] * len(layers)
        self.recurrent: list[pyggml.Tensor | None] = [None] * len(layers)
        for i in recurrent:
            shape = layers[i].state
            self.conv[i] = self.state_storage.new_tensor(
                "F32", (self.states.size, shape.conv), name=f"cache_conv_l{i}")
            self.recurrent[i] = self.state_storage.new_tensor(
                "F32", (self.states.size, shape.recurrent), name=f"cache_state_l{i}")
        if allocate:
            self.buffers = self._allocate(self.backends)

    @property
    def checkpoints(self) -> int:
        return self.states.checkpoints

    @property
    def keeps_checkpoints(self) -> bool:
        return self.states.checkpoints > 0

    def tensors(self, layer: int) -> list:
        if self.layers[layer].state is None:
            return super().tensors(layer)
        return [self.conv[layer], self.recurrent[layer]]

    def partition(self, sequences: int) -> None:
        super().partition(sequences)
        if sequences > self.states.sequences:
            raise CacheAllocationError(f"The recurrent states were sized for "
                                       f"{self.states.sequences} sequences, not {sequences}.")

    # -- runner side ----------------------------------------------------------------------

    def start(self, batch: Batch, all_cells: bool = False, streams: bool = False) -> None:
        super().start(batch, all_cells, streams=False)
        placement = self.current             # the KV cells' (the states' cells join them)
        runs, positions = batch.runs, batch.positions
        try:
            sources, targets = self.states.place(      # each run from its first position on
                [(seq, int(positions[a]), int(positions[a]) + b - a) for seq, a, b in runs])
        except Exception:
            for window, pool in self.pools.items():
                pool.release(placement.slots[window])
            raise
        groups: dict[int, list[int]] = {}
        for index, (_, start, stop) in enumerate(runs):
            groups.setdefault(stop - start, []).append(index)
        placed = {f.name: getattr(placement, f.name) for f in fields(Placement)}
        self._placement = HybridPlacement(**placed, sources=tuple(sources),
                                          targets=tuple(targets),
                                          state_groups=tuple(groups.items()))

    def holds(self, seq: int, n: int) -> bool:
        return self.states.holds(seq, n) and super().holds(seq, n)

    def rollback_point(self, seq: int, n: int) -> int:
        """The latest position at or before n that seq may resume at."""
        return self.states.rollback_point(seq, n)

    def remove(self, seq: int, p0: int = 0, p1: int | None = None) -> None:
        """Drop positions [p0, ...) of seq: back to its latest state at or before p0 (its
        cells from there on go too). A range that ends before the sequence does cannot be
        dropped from a recurrence."""
        if p1 is not None and (newest := self.states.newest(seq)) is not None and \
                newest.position > p1:
            raise ValueError("A recurrent state cannot drop a range of positions; evaluate "
                             "the kept tokens again instead.")
        p0 = self.rollback_point(seq, p0)
        self.states.truncate(seq, p0)
        super().remove(seq, p0)

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        super().copy_prefix(src, dst, n)
        self.states.fork(src, dst, n)

    def checkpoint(self, seq: int, position: int) -> bool:
        """Keep seq's state at position (a batch of it ended there) as a checkpoint."""
        return self.states.mark(seq, position)

    def inputs(self, ctx: pyggml.Context, windows=(None,), causal: bool = True,
               block_windows=()) -> GraphView:
        placement = self._placement
        if placement is None:
            raise RuntimeError("start(batch) must come before the graph is built.")
        assert isinstance(placement, HybridPlacement)     # start() places each batch so
        return HybridView(self, ctx, placement, windows, causal, block_windows)


class HybridView(GraphView):
    """A graph's view of a hybrid cache: the KV cache's, and the recurrent layers' states."""

    cache: HybridCache
    placement: HybridPlacement

    def __init__(self, cache: HybridCache, ctx, placement: HybridPlacement, windows,
                 causal: bool = True, block_windows=()):
        super().__init__(cache, ctx, placement, windows, causal, block_windows)
        self.state_groups = [t for t, _ in placement.state_groups]   # tokens of each group
        # (kind, group, rows a state is cut in) -> its input, made as layers ask
        self._inputs: dict[tuple[str, int, int], pyggml.Tensor] = {}
        self._order: pyggml.Tensor | None = None   # each row's place, where groups reorder

    def _input(self, kind: str, group: int, split: int = 1):
        """The graph input of kind ("src", "dst" rows of states cut in split rows each,
        "rows" gathered) for group, made the first time a layer asks (a graph without
        recurrent layers has none)."""
        key = (kind, group, split)
        if key not in self._inputs:
            count, tokens = len(self.placement.state_groups[group][1]), self.state_groups[group]
            n = count * tokens if kind == "rows" else count * split
            self._inputs[key] = self.ctx.new_tensor(
                INDEX_TYPES[kind][0], (n,), name=f"rs_{kind}_{group}_{split}").set_input()
        return self._inputs[key]

    def prepare(self, placement: Placement) -> None:
        assert isinstance(placement, HybridPlacement)     # a HybridCache's placement
        super().prepare(placement)
        runs, gathered = placement.batch.runs, []
        for group, (_, indices) in enumerate(placement.state_groups):
            rows = np.concatenate([np.arange(runs[i][1], runs[i][2]) for i in indices])
            gathered.append(rows)
            cells = {"src": np.array([placement.sources[i] for i in indices]),
                     "dst": np.array([placement.targets[i] for i in indices])}
            for (kind, at, split), tensor in self._inputs.items():
                if at != group:
                    continue
                value = rows if kind == "rows" else \
                    (cells[kind][:, None] * split + np.arange(split)).reshape(-1)
                self._values.append((tensor, value.astype(INDEX_TYPES[kind][1])))
        if self._order is not None:
            order = np.empty(len(placement.batch), np.int32)
            order[np.concatenate(gathered)] = np.arange(len(placement.batch), dtype=np.int32)
            self._values.append((self._order, order))

    def _offset(self, group: int) -> int:
        return sum(len(runs) * t for t, runs in self.placement.state_groups[:group])

    def rows(self, x, group: int):
        """x (T, ...) -> (S, t, ...): the rows of group's S sequences of t tokens each."""
        count, tokens = len(self.placement.state_groups[group][1]), self.state_groups[group]
        if self.placement.in_order:
            start = self._offset(group)
            flat = x.reshape(x.shape[0], -1)
            if start or count * tokens != x.shape[0]:
                flat = flat.view((count * tokens, flat.shape[1]),
                                 offset=start * flat.strides[0], strides=flat.strides)
            picked = flat
        else:
            picked = x.reshape(x.shape[0], -1).get_rows(self._input("rows", group))
        return picked.reshape(count, tokens, *x.shape[1:])

    def join(self, outs: list):
        """The groups' outputs, each (S * t, ...), as the batch's rows (T, ...)."""
        out = outs[0]
        for more in outs[1:]:
            out = out.concat(more, axis=0)
        if self.placement.in_order:
            return out
        if self._order is None:
            self._order = self.ctx.new_tensor(
                "I32", (len(self.placement.batch),), name="rs_order").set_input()
        return out.reshape(out.shape[0], -1).get_rows(self._order) \
            .reshape(out.shape)

    def conv_state(self, layer: int, group: int):
        """(S, channels, kernel - 1): the convolution states group's sequences start from."""
        shape = self.cache.layers[layer].state
        assert shape is not None                          # a recurrent layer's
        return self._read(self.cache.conv[layer], group).reshape(
            -1, shape.conv_channels, shape.conv_width)

    def recurrent_state(self, layer: int, group: int):
        """(S, recurrent floats): the recurrent states group's sequences start from."""
        return self._read(self.cache.recurrent[layer], group)

    def _read(self, storage, group: int):
        """(S, floats): group's sequences' states from storage (cells, floats)."""
        cells, floats = storage.shape
        split = pieces(floats)
        rows = self.ctx.bind(storage).reshape(cells * split, floats // split)
        return rows.get_rows(self._input("src", group, split)).reshape(-1, floats)

    def write_conv(self, layer: int, group: int, states) -> None:
        """Store group's new convolution states (S, channels, kernel - 1)."""
        self._write(self.cache.conv[layer], group, states)

    def write_recurrent(self, layer: int, group: int, states) -> None:
        """Store group's new recurrent states (S, recurrent floats)."""
        self._write(self.cache.recurrent[layer], group, states)

    def _write(self, storage, group: int, states) -> None:
        cells, floats = storage.shape
        split = pieces(floats)
        rows = (states if states.is_contiguous else states.cont()).reshape(-1, floats // split)
        self.writes.append(self.ctx.bind(storage).reshape(cells * split, floats // split)
                           .set_rows(rows, self._input("dst", group, split)))
