"""A causal KV cache: one pool of cells shared by sequences, each cell holding one position.

Runner side: start(batch) places the batch's tokens in free cells and prepares the masks;
remove(seq, p0, p1) and copy_prefix(src, dst, n) edit sequences; cells(seq, p0, p1) and
move(cells, delta) serve a position shift (the executor re-rotates the keys).
Model side (inside a graph): inputs(ctx) once per graph, then put(layer, k, v) and
keys/values(layer) views, and mask(window) for each kind of layer.

Layout: K is (cells, kv_dim) per layer. V is the same with flash attention, else stored
transposed, (kv_dim, cells), so the attention product reads it without a copy. A layer whose
values are the first dimensions of its keys (DeepSeek's latent rows) keeps no V of its own
with flash attention and an unrotated cache: V is read as a view of K, as llama.cpp does.
The cells a graph sees are padded to 256, as llama.cpp pads them, so that a decode step's
graph (and a GPU's captured CUDA graph) stays the same for 256 tokens; with flash attention
the mask is F16.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import pyggml
from pyggml.numpy_interop import in_range

from .rotation import Rotations, key_rotation, value_rotation

CACHE_TYPES = {"f16": "F16", "q8_0": "Q8_0", "q4_0": "Q4_0", "f32": "F32"}
PAD = 256             # cells a graph sees come in multiples of this (llama.cpp's)
NO_SEQ = 0
MAX_SEQS = 63          # a cell's sequences are bits of an int64


class CacheFullError(RuntimeError):
    pass


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


class CausalCache:
    """backends: where each layer's K and V live (one Backend for all layers, or one per
    layer: a layer's cache sits on the device that computes the layer). allocate=False
    describes the tensors without memory (to probe or measure a model)."""

    def __init__(self, layers: list[LayerShape], cells: int, backends, cache_type: str = "f16",
                 flash: bool = False, allocate: bool = True):
        check_cache_type(cache_type, flash)
        if cells < 1:
            raise ValueError(f"A KV cache needs at least one cell, not {cells}.")
        self.layers, self.size, self.flash = layers, cells, flash
        self.cache_type = cache_type
        # runs each layer's keys (and queries) and values are rotated in (rotation.py)
        self.key_rotation = [key_rotation(cache_type, s.head_dim) for s in layers]
        self.value_rotation = [value_rotation(cache_type, s.v_dim) for s in layers]
        self.pos = np.full(cells, -1, dtype=np.int64)
        self.seq = np.zeros(cells, dtype=np.int64)          # bit s set: cell belongs to seq s
        self.block = np.full(cells, -1, dtype=np.int64)     # the image a cell's row is of
        self.storage = pyggml.Context(max_tensors=2 * len(layers) + 1, graphs=0)
        ggml_type = CACHE_TYPES[cache_type]
        self.k, self.v = [], []
        for i, shape in enumerate(layers):
            self.k.append(self.storage.new_tensor(
                ggml_type, (cells, shape.kv_heads * shape.head_dim), name=f"cache_k_l{i}"))
            v_dims = shape.kv_heads * shape.v_dim
            in_keys = shape.values_in_keys and flash and self.key_rotation[i] is None and \
                self.value_rotation[i] is None
            self.v.append(None if in_keys else self.storage.new_tensor(
                ggml_type, (cells, v_dims) if flash else (v_dims, cells), name=f"cache_v_l{i}"))
        self.buffers = self._allocate(backends) if allocate else []
        self._placement = None
        self.region = 0                 # cells per sequence's home region (partition())
        self._v_rows: dict[int, np.ndarray] = {}

    def _allocate(self, backends) -> list[pyggml.Buffer]:
        """One buffer per device, holding the layers it computes; zeroed."""
        if isinstance(backends, pyggml.Backend):
            backends = [backends] * len(self.layers)
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

    def close(self) -> None:
        for buffer in self.buffers:
            buffer.close()

    def partition(self, sequences: int) -> None:
        """Give each of sequences a home region of cells, aligned to 256, that start() fills
        first. A sequence's cells then sit at the same offsets whoever else is in the cache,
        so the attention sums group their terms the same way (see docs/runner.md)."""
        self.region = (self.size // sequences) // PAD * PAD

    # -- runner side ----------------------------------------------------------------------

    def cells(self, seq: int, p0: int = 0, p1: int | None = None) -> np.ndarray:
        """Boolean mask of the cells holding positions [p0, p1) of seq (p1 None: to the end)."""
        hit = ((self.seq >> seq) & 1).astype(bool) & (self.pos >= p0)
        if p1 is not None:
            hit &= self.pos < p1
        return hit

    def used(self, seq: int) -> int:
        return int(np.count_nonzero(self.cells(seq)))

    def start(self, batch, all_cells: bool = False) -> None:
        """Place the batch in free cells and prepare slot indices and masks for its graph.
        all_cells: its graph sees every cell (the largest graph a batch of its size makes)."""
        if not in_range(batch.seqs, MAX_SEQS):
            raise ValueError(f"Sequence ids must lie in [0, {MAX_SEQS}), not "
                             f"{sorted(set(batch.seqs.tolist()))}.")
        free = self.seq == NO_SEQ
        n = len(batch)
        slots = np.flatnonzero(free)[:n]
        if len(slots) < n:
            raise CacheFullError(f"The KV cache has {len(slots)} free cells; the batch needs "
                                 f"{n}.")
        if self.region:
            slots = self._home_cells(batch, free)
        # the graph sees every cell up to the last one used, this batch's included (the
        # last used one: the last False of free; all True has argmin 0, a free cell)
        last = len(free) - 1 - int(free[::-1].argmin())
        last = max(-1 if free[last] else last, int(slots.max()) if self.region else
                   int(slots[-1]))
        self.pos[slots] = batch.positions
        self.seq[slots] = 1 << batch.seqs.astype(np.int64)
        self.block[slots] = batch.blocks
        n_kv = min(self.size, -(-(last + 1) // PAD) * PAD)
        self._placement = Placement(batch, slots, self.size if all_cells else n_kv)

    def _home_cells(self, batch, free: np.ndarray) -> np.ndarray:
        """Free cells for the batch, each sequence's from its home region first."""
        slots = np.empty(len(batch), dtype=np.int64)
        free = free.copy()
        for seq in np.unique(batch.seqs):
            rows = np.flatnonzero(batch.seqs == seq)
            home = slice(int(seq) * self.region, (int(seq) + 1) * self.region)
            found = np.flatnonzero(free[home])[:len(rows)] + home.start
            if len(found) < len(rows):
                others = np.flatnonzero(free)
                others = others[~np.isin(others, found)]
                found = np.concatenate([found, others[:len(rows) - len(found)]])
            slots[rows] = found
            free[found] = False
        return slots

    @property
    def current(self) -> "Placement":
        """The batch placed by the last start()."""
        return self._placement

    @property
    def n_kv(self) -> int:
        """How many cells the current batch's graph sees."""
        return self._placement.n_kv

    def mask(self, batch, n_kv: int, window: int | None, causal: bool = True,
             blocks: bool = False, dtype=np.float32) -> np.ndarray:
        """(T, n_kv) additive mask of dtype: 0 where token t of batch may attend to cell c,
        else -inf. window: None (all earlier positions), n (positions after the token's minus
        n), or ("chunk", n) (the earlier positions of the token's chunk of n, as Llama 4's
        chunked layers). Not causal (an encoder): every cell of the token's sequence, and a
        window n is symmetric, n // 2 positions either side (EmbeddingGemma, as llama.cpp's
        symmetric window and transformers' bidirectional one count it). blocks:
        the rows of one image also see its later rows (within the window). Each (T, n_kv)
        pass counts for a prompt (a 500-token one is 256k cells): 0.6 ms here, 3.8 before
        the passes were cut to these."""
        pos = self.pos[:n_kv].astype(np.int32)                                   # (n_kv,)
        seqs = batch.seqs
        first = int(seqs[0])
        if len(seqs) == 1 or (seqs == first).all():       # one sequence: one row of members
            member = (self.seq[:n_kv] & (1 << first)) != 0                       # (n_kv,)
        else:
            ids, row_of = np.unique(seqs, return_inverse=True)
            member = ((self.seq[:n_kv] >> ids[:, None].astype(np.int64)) & 1).astype(bool)
            member = member[row_of]                                              # (T, n_kv)
        member &= pos >= 0
        token_pos = batch.positions[:, None]                                     # (T, 1)
        if causal:
            seen = pos <= token_pos                                              # (T, n_kv)
            if blocks and (batch.blocks >= 0).any():
                token_block = batch.blocks[:, None]
                seen |= (self.block[:n_kv] == token_block) & (token_block >= 0)
            visible = seen & member
        else:
            visible = np.broadcast_to(member, (len(batch), n_kv)).copy()
        if isinstance(window, tuple):                                            # ("chunk", n)
            visible &= pos >= token_pos // window[1] * window[1]
        elif window is not None and not causal:
            visible &= np.abs(pos - token_pos) <= window // 2
        elif window is not None:
            visible &= pos > token_pos - window
        return np.where(visible, dtype(0), dtype(-np.inf))

    def remove(self, seq: int, p0: int = 0, p1: int | None = None) -> None:
        """Drop positions [p0, p1) of seq (p1 None: to the end)."""
        self.seq[self.cells(seq, p0, p1)] &= ~(1 << seq)
        empty = self.seq == NO_SEQ
        self.pos[empty], self.block[empty] = -1, -1

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """Let dst share src's cells for positions [0, n)."""
        self.remove(dst)
        self.seq[self.cells(src, 0, n)] |= 1 << dst

    def move(self, cells: np.ndarray, delta: int) -> None:
        """Shift the positions of cells (a mask from cells()) by delta."""
        self.pos[cells] += delta

    def positions_of(self, seq: int) -> np.ndarray:
        return np.sort(self.pos[self.cells(seq)])

    # -- model side -----------------------------------------------------------------------

    def v_rows(self, dims: int) -> np.ndarray:
        """int64 (dims,): where each row of a transposed V cache of dims rows starts, in
        elements (d * cells); made once, as every step's V write indexes from it."""
        rows = self._v_rows.get(dims)
        if rows is None:
            rows = self._v_rows[dims] = np.arange(dims, dtype=np.int64) * self.size
        return rows

    def inputs(self, ctx: pyggml.Context, windows=(None,), causal: bool = True,
               block_windows=()) -> "GraphView":
        """block_windows: the windows whose masks let an image's rows see each other."""
        placement = self._placement
        if placement is None:
            raise RuntimeError("start(batch) must come before the graph is built.")
        return GraphView(self, ctx, placement, windows, causal, block_windows)


@dataclass
class Placement:
    """Where start() put a batch: its cells and how many cells its graph sees."""
    batch: object
    slots: np.ndarray
    n_kv: int


class GraphView:
    """This graph's view of the cache: slot indices, masks, and the per-layer operations."""

    def __init__(self, cache: CausalCache, ctx: pyggml.Context, placement: Placement, windows,
                 causal: bool = True, block_windows=()):
        self.cache, self.ctx, self.placement, self.causal = cache, ctx, placement, causal
        self.block_windows = set(block_windows)
        n = len(placement.batch)
        self.slots = ctx.new_tensor("I64", (n,), name="kv_slots").set_input()
        mask_type = "F16" if cache.flash else "F32"
        self.masks = {w: ctx.new_tensor(mask_type, (n, placement.n_kv),
                                        name=f"kq_mask_{w}").set_input() for w in windows}
        self.v_index = None
        if not cache.flash:
            v_dims = {s.kv_heads * s.v_dim for s in cache.layers}
            self.v_index = {d: ctx.new_tensor("I64", (n * d,), name=f"v_idx_{d}").set_input()
                            for d in v_dims}
        self.rotations = Rotations(ctx, cache.key_rotation + cache.value_rotation)

    def prepare(self, placement: Placement) -> None:
        """Compute the cache inputs of placement (the batch's cells) now, while an earlier
        step may still be computing with this graph's memory: feed() only copies them."""
        cache = self.cache
        self.placement = placement
        values = [(self.slots, placement.slots.astype(np.int64, copy=False)),
                  *self.rotations.inputs()]
        for window, tensor in self.masks.items():
            values.append((tensor, cache.mask(
                placement.batch, placement.n_kv, window, self.causal,
                window in self.block_windows, np.float16 if cache.flash else np.float32)))
        for dims, tensor in (self.v_index or {}).items():
            # element (t, d) of the new V rows goes to row d, column slot[t] of the
            # transposed cache, flattened: d * cells + slot[t]
            index = cache.v_rows(dims)[None, :] + values[0][1][:, None]       # (T, dims)
            values.append((tensor, index.reshape(-1)))
        self._values = values

    def feed(self) -> None:
        """Fill this graph's cache inputs (after the scheduler allocated the graph)."""
        for tensor, value in self._values:
            tensor.set(value)

    def put(self, layer: int, k, v):
        """Store k (T, kv_heads, head_dim) and v (T, kv_heads, v_dim); returns the K and V
        cache nodes that include the write (read the cache through them)."""
        cache, ctx = self.cache, self.ctx
        n = len(self.placement.batch)
        k = self.rotations.rotate(k, cache.key_rotation[layer])
        v = self.rotations.rotate(v, cache.value_rotation[layer])
        k_cache = ctx.bind(cache.k[layer]).set_rows(k.reshape(n, -1), self.slots)
        v_flat = v.reshape(n, -1)
        if cache.v[layer] is None:                       # V is read from K's rows
            return k_cache, k_cache
        if cache.flash:
            v_cache = ctx.bind(cache.v[layer]).set_rows(v_flat, self.slots)
        else:
            dims = v_flat.shape[1]
            column = ctx.bind(cache.v[layer]).reshape(dims * cache.size, 1)
            v_cache = column.set_rows(v_flat.reshape(n * dims, 1), self.v_index[dims])
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
        return self._heads(k_node, shape.kv_heads, shape.head_dim)

    def values(self, layer: int, v_node):
        """Flash: (kv_heads, n_kv, v_dim). Otherwise the transposed (kv_heads, v_dim, n_kv),
        viewed through v_node (the flat column the write produced)."""
        shape = self.cache.layers[layer]
        if self.cache.flash:
            return self._heads(v_node, shape.kv_heads, shape.v_dim)
        element, cells = v_node.strides[-1], self.cache.size
        return v_node.view((shape.kv_heads, shape.v_dim, self.placement.n_kv),
                           strides=(shape.v_dim * cells * element, cells * element, element))

    def _heads(self, node, heads: int, dim: int):
        row = node.strides[0]                                  # bytes of one cell
        view = node.view((self.placement.n_kv, heads, dim),         # (n_kv, heads, dim)
                         strides=(row, row // heads, node.strides[-1]))
        return view.permute(1, 0, 2)                           # (heads, n_kv, dim)

    def mask(self, window: int | None = None):
        return self.masks[window]
