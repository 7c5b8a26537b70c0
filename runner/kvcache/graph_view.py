"""A graph's view of the causal KV cache (causal.py): where a batch's keys and values go,
the cells each layer reads, and the masks.

Per graph: CausalCache.inputs(ctx) makes one, then each layer calls put(layer, k, v), reads
keys/values(layer) as views, and takes mask(window) for its kind (built once per window).
prepare(placement) computes the cache inputs of a batch's cells (while an earlier step may
still compute with the graph's memory), feed() copies them in.

Masks are computed in the graph, on the device that attends, from the position each cell
holds of each of the batch's sequences (S x n_kv values) and the bounds of what each token
sees (T values), rather than on the host and copied in (T x n_kv values a step: 16M for a
512-token prompt chunk at 32k cells), as llama.cpp makes them. A decode step of one sequence
has as many values either way: its masks are made on the host, sparing the step the mask's
five to seven small kernels per window (a GPU's decode step is a few hundred kernels of a
few microseconds). Steps of several sequences keep the graph's masks: with theirs made on
the host too (and the views below), four streams without flash attention measured 6-11%
slower on an H100 than before both, one stream faster; which of the two costs the streams
was not isolated (bench/README.md). The keys and values are written to the cache as views,
as llama.cpp writes them, so that CUDA fuses the RoPE before the write with it. The
transposed V is written through the slots alone (broadcast over its rows), not through a
T x dims index.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

import pyggml

from .cells import Window, seen_bounds
from .rotation import Rotations

if TYPE_CHECKING:
    from ..engine.batch import Batch
    from .causal import CausalCache

BOUND_PERIOD = 32     # the most values of a token's mask bound repeated along a row


@dataclass
class Placement:
    """Where start() put a batch: per pool (by window), its cells, and how many cells its
    graph sees from which on (the first, 0 where not given: see Cells.place)."""
    batch: Batch
    slots: dict[Window, np.ndarray]
    n_kv: dict[Window, int]
    first: dict[Window, int] = field(default_factory=dict)
    streams: int = 0      # > 0: each sequence attends n_kv cells of its home region
    # in streams: (first sequence, count, spacing) of each group of evenly spaced
    # sequences, in order (CausalCache._streams)
    groups: tuple[tuple[int, int, int], ...] = ()

    @functools.cached_property
    def sequences(self) -> tuple[np.ndarray, np.ndarray]:
        """The batch's sequences (S,), and each token's index among them, int32 (T,)."""
        runs, seqs = self.batch.runs, self.batch.seqs
        if len(runs) == 1:
            return seqs[:1], np.zeros(len(seqs), dtype=np.int32)
        ids = [seq for seq, _, _ in runs]
        if all(a < b for a, b in zip(ids, ids[1:])):           # one run each, in order
            return (np.array(ids, dtype=seqs.dtype),
                    np.repeat(np.arange(len(runs), dtype=np.int32),
                              [stop - start for _, start, stop in runs]))
        unique, rows = np.unique(seqs, return_inverse=True)
        return unique, rows.astype(np.int32)

    def seen(self, window) -> tuple[int, int]:
        """The first cell the graph sees of window's pool, and how many."""
        return self.first.get(window, 0), self.n_kv[window]

    @property
    def shape(self) -> tuple:
        """What of the placement a graph's structure depends on: the cells it sees per pool
        (first and count) and how many sequences its masks tell apart."""
        return (*map(self.seen, self.n_kv), len(self.sequences[0]), self.streams,
                self.groups)


class GraphView:
    """This graph's view of the cache: slot indices, masks, and the per-layer operations."""

    def __init__(self, cache: CausalCache, ctx: pyggml.Context, placement: Placement, windows,
                 causal: bool = True, block_windows=()):
        self.cache, self.ctx, self.placement, self.causal = cache, ctx, placement, causal
        self.block_windows = set(block_windows)
        n = len(placement.batch)
        self.slots = {w: ctx.new_tensor("I64", (n,), name=f"kv_slots_{w}").set_input()
                      for w in set(cache.pool_of)}
        # window -> its mask, built the first time a layer asks for it
        self.masks: dict[Window, pyggml.Tensor] = {}
        sequences = len(placement.sequences[0])
        self.host_masks = n == 1          # one sequence's decode step: masks made here
        # each token's row of the cells' positions, where the graph masks several sequences
        self._rows = ctx.new_tensor("I32", (n,), name="kq_rows").set_input() \
            if sequences > 1 else None
        self._floats, self._host, self._views, self._pieces = self._mask_inputs(windows)
        self.rotations = Rotations(ctx, cache.key_rotation + cache.value_rotation)
        self.writes: list = []    # cache writes no later node reads (recurrent states)

    # the inputs prepare() computed, (tensor, value) each, that feed() copies in
    _values: list[tuple[pyggml.Tensor, np.ndarray]]

    @property
    def streams(self) -> int:
        """> 0: each sequence attends its own region (a kept graph's placements all agree)."""
        return self.placement.streams

    @property
    def groups(self) -> tuple:
        """In streams, (first sequence, count, spacing) of each group (Placement.groups)."""
        return self.placement.groups

    def _group_cells(self, pool, group: int) -> tuple[int, int, int]:
        """A group's streams: how many, the first one's first cell, and the cells from one
        stream's first to the next's."""
        seq, count, spacing = self.groups[group]
        return count, seq * pool.region, spacing * pool.region

    def _seen(self, pool) -> tuple[int, int]:
        return self.placement.seen(pool.window)

    def _mask_inputs(self, windows):
        """The masks' float inputs, views of one tensor (one copy a step), and the pieces of
        one array that prepare() writes them into (_layout)."""
        layout = self._layout(windows)
        sizes = [rows * columns for _, (rows, columns) in layout]
        floats = self.ctx.new_tensor("F32", (sum(sizes),), name="kq_inputs").set_input()
        host = np.empty(sum(sizes), dtype=np.float32)
        views, pieces, offset = {}, {}, 0
        for (key, shape), size in zip(layout, sizes):
            views[key] = floats.view(shape, offset=offset * host.itemsize)
            pieces[key] = host[offset:offset + size].reshape(shape)
            offset += size
        return floats, host, views, pieces

    def _layout(self, windows) -> list:
        """[((what, window), shape)] of the masks' inputs. Masks made here: per window
        ("mask", window), (T, n_kv), from each pool's positions (self._held, (S, n_kv)).
        Made in the graph: per pool ("positions", its window), the position each cell holds
        of each sequence, (S, n_kv); per window ("first" and "last", the window), each
        token's bounds, (T, period) each, repeated along a row's period (binary ops repeat a
        smaller operand along rows quickly, one element at a time slowly); no first bound
        without a window."""
        n, sequences = len(self.placement.batch), len(self.placement.sequences[0])
        pools = dict.fromkeys(self.cache.pool_for(w).window for w in windows)
        if self.host_masks:
            self._held = {w: np.empty((sequences, self.placement.n_kv[w]), np.float32)
                          for w in pools}
            return [(("mask", w), (n, self.placement.n_kv[self.cache.pool_for(w).window]))
                    for w in windows]
        layout = [(("positions", w), (sequences, self.placement.n_kv[w])) for w in pools]
        for window in windows:
            _, n_kv = self._seen(self.cache.pool_for(window))
            period = min(n_kv & -n_kv, BOUND_PERIOD)
            layout += [((side, window), (n, period))
                       for side in ("first", "last") if side == "last" or window is not None]
        return layout

    def _mask(self, window, layer: int):
        """(T, n_kv) additive mask, F16 with flash attention, else F32: 0 where a token sees
        a cell, else -inf, computed in the graph on layer's device (not on the host, nor on
        the CPU and copied over) from inputs of S x n_kv + T values, not T x n_kv: a cell is
        seen where the position it holds of the token's sequence lies between the token's
        bounds (seen_bounds), i.e. where (position - first) * (position - last) < 0, or,
        with no first bound, where position - last < 0; a cell holding none of the
        sequence's positions (ABSENT) lies beyond every bound."""
        n, views = len(self.placement.batch), self._views
        if self.host_masks:          # the input's view itself stays where the input lies
            mask = views["mask", window]                                # (T, n_kv)
            return self._on_device([mask.cast("F16")], layer) if self.cache.flash else mask
        positions = views["positions", self.cache.pool_for(window).window]     # (S, n_kv)
        held = positions.repeat(n, positions.shape[1]) if self._rows is None else \
            positions.get_rows(self._rows)                              # (T, n_kv)
        nodes = [held, held - views["last", window]]                    # < 0: up to last
        if window is not None:
            nodes += [held - views["first", window]]
            nodes += [nodes[-1] * nodes[1]]                             # < 0: in between
        nodes += [nodes[-1].scale(-math.inf)]
        nodes += [nodes[-1].clamp(-math.inf, 0.0)]                      # 0 or -inf
        if self.cache.flash:
            nodes += [nodes[-1].cast("F16")]
        return self._on_device(nodes, layer)

    def _on_device(self, nodes: list, layer: int):
        """The last of a mask's nodes, each placed on layer's device."""
        if self.cache.backends is not None:
            for node in nodes:
                self.ctx.place(node, self.cache.backends[layer])
        return nodes[-1]

    def prepare(self, placement: Placement) -> None:
        """Compute the cache inputs of placement (the batch's cells) now, while an earlier
        step may still be computing with this graph's memory: feed() only copies them."""
        self.placement = placement
        batch, (seqs, rows) = placement.batch, placement.sequences
        slots = {w: s.astype(np.int64, copy=False) for w, s in placement.slots.items()}
        values = [*((tensor, slots[w]) for w, tensor in self.slots.items()),
                  *self.rotations.inputs()]
        if self.masks:
            if self.host_masks:
                for window, held in self._held.items():
                    self._positions_into(window, seqs, held)
                for window in self.masks:
                    self._host_mask(window)
            else:
                self._graph_mask_inputs(values, batch, seqs, rows)
            values.append((self._floats, self._host))
        self._values = values

    def _graph_mask_inputs(self, values: list, batch, seqs: np.ndarray, rows: np.ndarray):
        """The inputs the graph makes its masks from (_mask): the cells' positions of each
        sequence, each token's bounds, and (several sequences) each token's row."""
        if self._rows is not None:
            values.append((self._rows, rows))
        for (side, window), piece in self._pieces.items():
            if side == "positions":
                self._positions_into(window, seqs, piece)
        for window in self.masks:
            first, last = seen_bounds(batch, window, self.causal, window in self.block_windows)
            self._pieces["last", window][:] = last[:, None]
            if first is not None:
                self._pieces["first", window][:] = first[:, None]

    def _host_mask(self, window) -> None:
        """window's mask, made here as the graph would make it (see _mask): 0 where the
        position a cell holds of the token's sequence lies between the token's bounds."""
        first, last = seen_bounds(self.placement.batch, window, self.causal,
                                  window in self.block_windows)
        held = self._held[self.cache.pool_for(window).window]               # (1, n_kv)
        seen = held < last[:, None]
        if first is not None:
            seen &= held > first[:, None]
        piece = self._pieces["mask", window]
        piece.fill(-math.inf)
        piece[seen] = 0.0

    def _positions_into(self, window, seqs: np.ndarray, piece: np.ndarray) -> None:
        """Each sequence's row of the cells' positions: of the cells the graph sees, or in
        streams of the cells its own region's view sees."""
        pool = self.cache.pools[window]
        if not self.streams:
            pool.positions_into(seqs, piece, self.placement.seen(window)[0])
            return
        row = 0
        for group in range(len(self.groups)):
            count, first, apart = self._group_cells(pool, group)
            pool.positions_into(seqs[row:row + count], piece[row:row + count], first, apart)
            row += count

    def feed(self) -> None:
        """Fill this graph's cache inputs (after the scheduler allocated the graph)."""
        values, self._values = self._values, []
        for tensor, value in values:
            tensor.set(value)

    def put(self, layer: int, k, v):
        """Store k (T, kv_heads, head_dim) and v (T, kv_heads, v_dim); returns the K and V
        cache nodes that include the write (read the cache through them)."""
        cache, ctx = self.cache, self.ctx
        n, window = len(self.placement.batch), cache.pool_of[layer]
        k = self.rotations.rotate(k, cache.key_rotation[layer])
        v = self.rotations.rotate(v, cache.value_rotation[layer])
        k_cache = ctx.bind(cache.k[layer]).set_rows(_flat_rows(k, n), self.slots[window])
        v_flat, v_tensor = _flat_rows(v, n), cache.v[layer]
        if v_tensor is None:                             # V is read from K's rows
            return k_cache, k_cache
        if cache.flash:
            v_cache = ctx.bind(v_tensor).set_rows(v_flat, self.slots[window])
        else:
            # the transposed cache (dims, cells) seen as (dims, cells, 1): rows of one element,
            # the slots' column written in every one of its dims rows (the slots broadcast)
            dims, cells = v_flat.shape[1], cache.pools[window].size
            v_element, element = v_flat.strides[-1], v_tensor.strides[-1]
            columns = ctx.bind(v_tensor).view(
                (dims, cells, 1), strides=(cells * element, element, element))
            new = v_flat.view((dims, n, 1), strides=(v_element, dims * v_element, v_element))
            v_cache = columns.set_rows(new, self.slots[window])
        return k_cache, v_cache

    def queries(self, layer: int, q):
        """q (T, H, D) as it meets the cache layer's keys (rotated as they were)."""
        return self.rotations.rotate(q, self.cache.key_rotation[layer])

    def output(self, layer: int, out):
        """Attention's output (T, H * Dv) through the layer's values, rotated back."""
        return self.rotations.rotate(out, self.cache.value_rotation[layer])

    def keys(self, layer: int, k_node, group: int = 0):
        """(kv_heads, n_kv, head_dim) view of the K cache, read after k_node's write; in
        streams (S, kv_heads, n_kv, head_dim) of group's S sequences, each its region."""
        shape = self.cache.layers[layer]
        return self._heads(k_node, shape.kv_heads, shape.head_dim, layer, group)

    def values(self, layer: int, v_node, group: int = 0):
        """Flash: (kv_heads, n_kv, v_dim). Otherwise the transposed (kv_heads, v_dim, n_kv),
        viewed through v_node (the flat column the write produced). In streams, (S, ...)
        of those, group's."""
        shape, pool = self.cache.layers[layer], self.cache.cells_of(layer)
        if self.cache.flash:
            return self._heads(v_node, shape.kv_heads, shape.v_dim, layer, group)
        element, cells = v_node.strides[-1], pool.size
        first, n_kv = self._seen(pool)
        view: tuple[int, ...] = (shape.kv_heads, shape.v_dim, n_kv)
        strides: tuple[int, ...] = (shape.v_dim * cells * element, cells * element, element)
        if self.streams:                       # each sequence's columns, in its region
            count, first, apart = self._group_cells(pool, group)
            view, strides = (count, *view), (apart * element, *strides)
        return v_node.view(view, strides=strides, offset=first * element)

    def _heads(self, node, heads: int, dim: int, layer: int, group: int):
        row = node.strides[0]                                  # bytes of one cell
        pool = self.cache.cells_of(layer)
        first, n_kv = self._seen(pool)
        view: tuple[int, ...] = (n_kv, heads, dim)             # (n_kv, heads, dim)
        strides: tuple[int, ...] = (row, row // heads, node.strides[-1])
        if self.streams:                                       # (S, n_kv, heads, dim)
            count, first, apart = self._group_cells(pool, group)
            view, strides = (count, *view), (apart * row, *strides)
        found = node.view(view, strides=strides, offset=first * row)
        return found.permute(0, 2, 1, 3) if self.streams else \
            found.permute(1, 0, 2)                             # (heads, n_kv, dim)

    def mask(self, window=None, layer: int | None = None):
        """The mask of window; layer: the layer it is for, whose cells must be window's."""
        if layer is not None and self.cache.pool_for(window) is not self.cache.cells_of(layer):
            raise ValueError(f"Layer {layer} keeps its cells for window "
                             f"{self.cache.layers[layer].window!r} but attends through "
                             f"window {window!r}.")
        if window not in self.masks:
            if layer is None:          # the first layer attending through window
                layer = next((i for i, s in enumerate(self.cache.layers) if s.window == window),
                             0)
            self.masks[window] = self._mask(window, layer)
        return self.masks[window]


def _flat_rows(t, n: int):
    """Contiguous t (n, ...) as (n, rest): a view, as llama.cpp writes its cache, where a
    reshape would do, so that CUDA fuses the RoPE that made t with the write."""
    if not t.is_contiguous:
        raise ValueError("A cache write takes contiguous keys and values.")
    return t.view((n, t.size // n))
