"""A causal KV cache: one pool of cells shared by sequences, each cell holding one position.

Runner side: start(batch) places the batch's tokens in free cells;
remove(seq, p0, p1) and copy_prefix(src, dst, n) edit sequences; shift_cells(seq, p0, p1)
and move(seq, p0, p1, delta) serve a position shift (the executor re-rotates the keys);
holds(seq, n) says whether a prefix of n positions can be resumed.
Model side (inside a graph): inputs(ctx) once per graph, then put(layer, k, v) and
keys/values(layer) views, and mask(window) for each kind of layer.

Pools (cells.py): the layers that attend to the whole context share one pool of cells;
with window_cells, the layers of each sliding window (or chunk) share a pool of that
window's size for every sequence plus a batch, whose cells are reused once out of sight.
A window pool's layers keep tensors of its size, and its graph inputs (slots, masks, the
cells it sees) are its own.

Layout: K is (cells, kv_dim) per layer. V is the same with flash attention, else stored
transposed, (kv_dim, cells), so the attention product reads it without a copy. A layer whose
values are the first dimensions of its keys (DeepSeek's latent rows) keeps no V of its own
with flash attention and an unrotated cache: V is read as a view of K, as llama.cpp does.
The cells a graph sees are padded to 256, as llama.cpp pads them, so that a decode step's
graph (and a GPU's captured CUDA graph) stays the same for 256 tokens; with flash attention
the mask is F16.

Masks are computed in the graph, on the device that attends, from the position each cell
holds of each of the batch's sequences (S x n_kv values) and the bounds of what each token
sees (T values), rather than on the host and copied in (T x n_kv values a step: 16M for a
512-token prompt chunk at 32k cells), as llama.cpp makes them. The transposed V is written
through the slots alone (broadcast over its rows), not through a T x dims index.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

import pyggml
from pyggml.numpy_interop import in_range

from .cells import MAX_SEQS, CacheFullError, Cells, pool_size, seen_bounds
from .rotation import Rotations, key_rotation, value_rotation

BOUND_PERIOD = 32     # the most values of a token's mask bound repeated along a row
CACHE_TYPES = {"f16": "F16", "q8_0": "Q8_0", "q4_0": "Q4_0", "f32": "F32"}


class CacheAllocationError(MemoryError):
    pass


def check_cache_type(cache_type: str, flash: bool) -> None:
    if cache_type not in CACHE_TYPES:
        raise ValueError(f"Unknown KV cache type {cache_type!r}; choose one of "
                         f"{', '.join(CACHE_TYPES)}.")
    if cache_type not in ("f16", "f32") and not flash:
        raise ValueError(f"A {cache_type} KV cache needs flash attention.")
    if cache_type == "f32" and flash:
        raise ValueError("An f32 KV cache (for exact comparisons) works without flash "
                         "attention only.")


@dataclass
class LayerShape:
    kv_heads: int
    head_dim: int       # of K
    v_dim: int          # of V, per head
    values_in_keys: bool = False    # V is each K row's first v_dim (one KV head)
    window: object = None           # the layer's attention window (cells.first_seen's)


class CausalCache:
    """backends: where each layer's K and V live (one Backend for all layers, or one per
    layer: a layer's cache sits on the device that computes the layer). allocate=False
    describes the tensors without memory (to probe or measure a model). window_cells:
    (parallel, batch) gives each window's layers a pool of window × parallel + batch cells
    (None: every layer keeps cells for the whole context, as llama.cpp's --swa-full)."""

    def __init__(self, layers: list[LayerShape], cells: int, backends, cache_type: str = "f16",
                 flash: bool = False, allocate: bool = True, window_cells=None):
        check_cache_type(cache_type, flash)
        if cells < 1:
            raise ValueError(f"A KV cache needs at least one cell, not {cells}.")
        self.layers, self.size, self.flash = layers, cells, flash
        self.cache_type = cache_type
        self.pools = {None: Cells(cells)}            # window (None: whole) -> its cells
        for window in {s.window for s in layers if s.window is not None and window_cells}:
            size = pool_size(window, cells, *window_cells)
            if size < cells:
                self.pools[window] = Cells(size, window)
        self.pool_of = [s.window if s.window in self.pools else None for s in layers]
        # runs each layer's keys (and queries) and values are rotated in (rotation.py)
        self.key_rotation = [key_rotation(cache_type, s.head_dim) for s in layers]
        self.value_rotation = [value_rotation(cache_type, s.v_dim) for s in layers]
        self.storage = pyggml.Context(max_tensors=2 * len(layers) + 1, graphs=0)
        ggml_type = CACHE_TYPES[cache_type]
        self.k, self.v = [], []
        for i, shape in enumerate(layers):
            n = self.cells_of(i).size
            self.k.append(self.storage.new_tensor(
                ggml_type, (n, shape.kv_heads * shape.head_dim), name=f"cache_k_l{i}"))
            v_dims = shape.kv_heads * shape.v_dim
            in_keys = shape.values_in_keys and flash and self.key_rotation[i] is None and \
                self.value_rotation[i] is None
            self.v.append(None if in_keys else self.storage.new_tensor(
                ggml_type, (n, v_dims) if flash else (v_dims, n), name=f"cache_v_l{i}"))
        if isinstance(backends, pyggml.Backend):
            backends = [backends] * len(layers)
        self.backends = backends           # per layer (None: not known)
        self.buffers = self._allocate(backends) if allocate else []
        self._placement = None

    def _allocate(self, backends) -> list[pyggml.Buffer]:
        """One buffer per device, holding the layers it computes; zeroed."""
        groups: dict[int, tuple] = {}
        for layer, backend in enumerate(backends):
            groups.setdefault(id(backend), (backend, []))[1].extend(self.tensors(layer))
        buffers = []
        for backend, tensors in groups.values():
            try:
                buffers += pyggml.allocate(backend.device.buffer_type(), tensors)
            except pyggml.GGMLError as error:
                raise CacheAllocationError(f"The KV cache does not fit on {backend.device.name}:"
                                           f" {error}") from None
        for buffer in buffers:
            buffer.clear(0)
        return buffers

    def tensors(self, layer: int) -> list:
        """The layer's cache tensors: K and V, or K alone where V is read from it."""
        return [t for t in (self.k[layer], self.v[layer]) if t is not None]

    def cells_of(self, layer: int) -> Cells:
        """The pool whose cells the layer's tensors hold."""
        return self.pools[self.pool_of[layer]]

    def pool_for(self, window) -> Cells:
        """The pool the layers attending through window keep their cells in."""
        return self.pools.get(window, self.pools[None])

    def close(self) -> None:
        for buffer in self.buffers:
            buffer.close()

    def partition(self, sequences: int) -> None:
        """Give each of sequences a home region in every pool (Cells.partition)."""
        for pool in self.pools.values():
            pool.partition(sequences)

    # -- runner side: the whole pool answers for what a sequence holds ---------------------

    @property
    def whole(self) -> Cells:
        return self.pools[None]

    @property
    def pos(self) -> np.ndarray:
        return self.whole.pos

    @property
    def seq(self) -> np.ndarray:
        return self.whole.seq

    @property
    def region(self) -> int:
        return self.whole.region

    def cells(self, seq: int, p0: int = 0, p1: int | None = None) -> np.ndarray:
        """Boolean mask of the whole pool's cells holding positions [p0, p1) of seq."""
        return self.whole.cells(seq, p0, p1)

    def used(self, seq: int) -> int:
        return self.whole.used(seq)

    def positions_of(self, seq: int) -> np.ndarray:
        return self.whole.positions_of(seq)

    def holds(self, seq: int, n: int) -> bool:
        """Whether seq's next token at position n finds what it sees in every pool: the
        rule by which a cached prefix of n positions is resumed (else evaluated again)."""
        return all(pool.holds(seq, n) for pool in self.pools.values())

    def start(self, batch, all_cells: bool = False) -> None:
        """Place the batch in free cells of every pool (its graph's cache inputs follow from
        the placement: GraphView.prepare). all_cells: its graph sees every cell (the
        largest graph a batch of its size makes)."""
        if not in_range(batch.seqs, MAX_SEQS):
            raise ValueError(f"Sequence ids must lie in [0, {MAX_SEQS}), not "
                             f"{sorted(set(batch.seqs.tolist()))}.")
        slots, n_kv = {}, {}
        try:
            for window, pool in self.pools.items():
                slots[window], n_kv[window] = pool.place(batch, all_cells)
        except CacheFullError:
            for window, taken in slots.items():
                self.pools[window].release(taken)
            raise
        self._placement = Placement(batch, slots, n_kv)

    @property
    def current(self) -> "Placement":
        """The batch placed by the last start()."""
        return self._placement

    @property
    def n_kv(self) -> int:
        """How many of the whole pool's cells the current batch's graph sees."""
        return self._placement.n_kv[None]

    def remove(self, seq: int, p0: int = 0, p1: int | None = None) -> None:
        """Drop positions [p0, p1) of seq (p1 None: to the end)."""
        for pool in self.pools.values():
            pool.remove(seq, p0, p1)

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """Let dst share src's cells for positions [0, n)."""
        for pool in self.pools.values():
            pool.copy_prefix(src, dst, n)

    def shift_cells(self, seq: int, p0: int, p1: int) -> dict:
        """Per pool, the cells holding positions [p0, p1) of seq (what a shift moves)."""
        return {window: pool.cells(seq, p0, p1) for window, pool in self.pools.items()}

    def move(self, seq: int, p0: int, p1: int, delta: int) -> None:
        """Shift positions [p0, p1) of seq by delta."""
        for window, hit in self.shift_cells(seq, p0, p1).items():
            self.pools[window].pos[hit] += delta

    # -- model side -----------------------------------------------------------------------

    def inputs(self, ctx: pyggml.Context, windows=(None,), causal: bool = True,
               block_windows=()) -> "GraphView":
        """block_windows: the windows whose masks let an image's rows see each other."""
        placement = self._placement
        if placement is None:
            raise RuntimeError("start(batch) must come before the graph is built.")
        return GraphView(self, ctx, placement, windows, causal, block_windows)


@dataclass
class Placement:
    """Where start() put a batch: per pool (by window), its cells and how many cells its
    graph sees."""
    batch: object
    slots: dict
    n_kv: dict

    @functools.cached_property
    def sequences(self) -> tuple[np.ndarray, np.ndarray]:
        """The batch's sequences (S,), and each token's index among them, int32 (T,)."""
        seqs = self.batch.seqs
        if len(seqs) == 1 or (seqs == seqs[0]).all():
            return seqs[:1], np.zeros(len(seqs), dtype=np.int32)
        ids, rows = np.unique(seqs, return_inverse=True)
        return ids, rows.astype(np.int32)

    @property
    def shape(self) -> tuple:
        """What of the placement a graph's structure depends on: the cells it sees per pool
        and how many sequences its masks tell apart."""
        return (*self.n_kv.values(), len(self.sequences[0]))


class GraphView:
    """This graph's view of the cache: slot indices, masks, and the per-layer operations."""

    def __init__(self, cache: CausalCache, ctx: pyggml.Context, placement: Placement, windows,
                 causal: bool = True, block_windows=()):
        self.cache, self.ctx, self.placement, self.causal = cache, ctx, placement, causal
        self.block_windows = set(block_windows)
        n = len(placement.batch)
        self.slots = {w: ctx.new_tensor("I64", (n,), name=f"kv_slots_{w}").set_input()
                      for w in set(cache.pool_of)}
        self.masks = {}       # window -> its mask, built the first time a layer asks for it
        # each token's row of the cells' positions, where the batch holds several sequences
        self._rows = ctx.new_tensor("I32", (n,), name="kq_rows").set_input() \
            if len(placement.sequences[0]) > 1 else None
        self._floats, self._host, self._views, self._pieces = self._mask_inputs(windows)
        self.rotations = Rotations(ctx, cache.key_rotation + cache.value_rotation)

    def _n_kv(self, pool) -> int:
        return self.placement.n_kv[pool.window]

    def _mask_inputs(self, windows):
        """The masks' float inputs, views of one tensor (one copy a step), and the pieces of
        one array that prepare() writes them into: per pool ("positions", its window), the
        position each cell holds of each sequence, (S, n_kv); per window ("first" and
        "last", the window), each token's bounds, (T, period) each, repeated along a row's
        period (binary ops repeat a smaller operand along rows quickly, one element at a
        time slowly); no first bound without a window."""
        n, sequences = len(self.placement.batch), len(self.placement.sequences[0])
        layout = []
        for window in dict.fromkeys(self.cache.pool_for(w).window for w in windows):
            layout.append((("positions", window), (sequences, self.placement.n_kv[window])))
        for window in windows:
            n_kv = self._n_kv(self.cache.pool_for(window))
            period = min(n_kv & -n_kv, BOUND_PERIOD)
            layout += [((side, window), (n, period))
                       for side in ("first", "last") if side == "last" or window is not None]
        sizes = [rows * columns for _, (rows, columns) in layout]
        floats = self.ctx.new_tensor("F32", (sum(sizes),), name="kq_inputs").set_input()
        host = np.empty(sum(sizes), dtype=np.float32)
        views, pieces, offset = {}, {}, 0
        for (key, shape), size in zip(layout, sizes):
            views[key] = floats.view(shape, offset=offset * host.itemsize)
            pieces[key] = host[offset:offset + size].reshape(shape)
            offset += size
        return floats, host, views, pieces

    def _mask(self, window, layer: int):
        """(T, n_kv) additive mask, F16 with flash attention, else F32: 0 where a token sees
        a cell, else -inf, computed in the graph on layer's device (not on the host, nor on
        the CPU and copied over) from inputs of S x n_kv + T values, not T x n_kv: a cell is
        seen where the position it holds of the token's sequence lies between the token's
        bounds (seen_bounds), i.e. where (position - first) * (position - last) < 0, or,
        with no first bound, where position - last < 0; a cell holding none of the
        sequence's positions (ABSENT) lies beyond every bound."""
        n, views = len(self.placement.batch), self._views
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
            if self._rows is not None:
                values.append((self._rows, rows))
            for (side, window), piece in self._pieces.items():
                if side == "positions":
                    self.cache.pools[window].positions_into(seqs, piece)
            for window in self.masks:
                first, last = seen_bounds(batch, window, self.causal,
                                          window in self.block_windows)
                self._pieces["last", window][:] = last[:, None]
                if first is not None:
                    self._pieces["first", window][:] = first[:, None]
            values.append((self._floats, self._host))
        self._values = values

    def feed(self) -> None:
        """Fill this graph's cache inputs (after the scheduler allocated the graph)."""
        values, self._values = self._values, ()
        for tensor, value in values:
            tensor.set(value)

    def put(self, layer: int, k, v):
        """Store k (T, kv_heads, head_dim) and v (T, kv_heads, v_dim); returns the K and V
        cache nodes that include the write (read the cache through them)."""
        cache, ctx = self.cache, self.ctx
        n, window = len(self.placement.batch), cache.pool_of[layer]
        k = self.rotations.rotate(k, cache.key_rotation[layer])
        v = self.rotations.rotate(v, cache.value_rotation[layer])
        k_cache = ctx.bind(cache.k[layer]).set_rows(k.reshape(n, -1), self.slots[window])
        v_flat = v.reshape(n, -1)
        if cache.v[layer] is None:                       # V is read from K's rows
            return k_cache, k_cache
        if cache.flash:
            v_cache = ctx.bind(cache.v[layer]).set_rows(v_flat, self.slots[window])
        else:
            # the transposed cache (dims, cells) seen as (dims, cells, 1): rows of one element,
            # the slots' column written in every one of its dims rows (the slots broadcast)
            dims, cells = v_flat.shape[1], cache.pools[window].size
            v_element, element = v_flat.strides[-1], cache.v[layer].strides[-1]
            columns = ctx.bind(cache.v[layer]).view(
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

    def keys(self, layer: int, k_node):
        """(kv_heads, n_kv, head_dim) view of the K cache, read after k_node's write."""
        shape = self.cache.layers[layer]
        return self._heads(k_node, shape.kv_heads, shape.head_dim, layer)

    def values(self, layer: int, v_node):
        """Flash: (kv_heads, n_kv, v_dim). Otherwise the transposed (kv_heads, v_dim, n_kv),
        viewed through v_node (the flat column the write produced)."""
        shape, pool = self.cache.layers[layer], self.cache.cells_of(layer)
        if self.cache.flash:
            return self._heads(v_node, shape.kv_heads, shape.v_dim, layer)
        element, cells = v_node.strides[-1], pool.size
        return v_node.view((shape.kv_heads, shape.v_dim, self._n_kv(pool)),
                           strides=(shape.v_dim * cells * element, cells * element, element))

    def _heads(self, node, heads: int, dim: int, layer: int):
        row = node.strides[0]                                  # bytes of one cell
        n_kv = self._n_kv(self.cache.cells_of(layer))
        view = node.view((n_kv, heads, dim),                   # (n_kv, heads, dim)
                         strides=(row, row // heads, node.strides[-1]))
        return view.permute(1, 0, 2)                           # (heads, n_kv, dim)

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
