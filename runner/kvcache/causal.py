"""A causal KV cache: one pool of cells shared by sequences, each cell holding one position.

Runner side: start(batch) places the batch's tokens in free cells;
remove(seq, p0, p1) and copy_prefix(src, dst, n) edit sequences; shift_cells(seq, p0, p1)
and move(seq, p0, p1, delta) serve a position shift (the executor re-rotates the keys);
holds(seq, n) says whether a prefix of n positions can be resumed.
Model side (inside a graph): inputs(ctx) once per graph, a GraphView (graph_view.py).

Pools (cells.py): the layers that attend to the whole context share one pool of cells;
with window_cells, the layers of each sliding window (or chunk) share a pool of that
window's size for every sequence plus a batch, whose cells are reused once out of sight.
A window pool's layers keep tensors of its size, and its graph inputs (slots, masks, the
cells it sees) are its own.

Layout: K is (cells, kv_dim) per layer. V is the same with flash attention, else stored
transposed, (kv_dim, cells), so the attention product reads it without a copy. A layer whose
values are the first dimensions of its keys (DeepSeek's latent rows) keeps no V of its own
with flash attention and an unrotated cache: V is read as a view of K, as llama.cpp does.
The cells a graph sees run from the first to the last cell of its batch's sequences, in
whole blocks of 256 (as llama.cpp pads them, so that a decode step's graph, and a GPU's
captured CUDA graph, stays the same for 256 tokens; Ollama's cache attends its batch's
sequences' range of cells too): a sequence alone in its slot does not attend the cells the
other slots keep. A batch of decode steps of several sequences, each in its home region,
attends in streams instead (_streams): each sequence its own region's first cells, through
4-D views of each group of evenly spaced sequences, as llama.cpp's cache streams. With flash
attention the mask is F16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

import pyggml
from pyggml.numpy_interop import in_range

from .cells import MAX_SEQS, CacheFullError, Cells, Window, pool_size
from .graph_view import GraphView, Placement
from .rotation import key_rotation, value_rotation

if TYPE_CHECKING:
    from ..engine.batch import Batch
    from .hybrid import StateShape

CACHE_TYPES = {"f16": "F16", "q8_0": "Q8_0", "q4_0": "Q4_0", "f32": "F32"}
MAX_GROUPS = 4       # the most groups of streams a graph attends in (each its own products)


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
    window: Window = None           # the layer's attention window (cells.first_seen's)
    state: StateShape | None = None     # a recurrent layer's (hybrid.py): no K or V


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
        self.sequences = 1                  # the sequences that share the cells (partition())
        self.pools: dict[Window, Cells] = {None: Cells(cells)}   # window (None: whole) -> cells
        for window in {s.window for s in layers if s.window is not None and window_cells}:
            size = pool_size(window, cells, *window_cells)
            if size < cells:
                self.pools[window] = Cells(size, window)
        self.pool_of = [s.window if s.window in self.pools else None for s in layers]
        # runs each layer's keys (and queries) and values are rotated in (rotation.py)
        self.key_rotation = [key_rotation(cache_type, s.head_dim) if s.state is None else None
                             for s in layers]
        self.value_rotation = [value_rotation(cache_type, s.v_dim) if s.state is None else
                               None for s in layers]
        self.storage = pyggml.Context(max_tensors=2 * len(layers) + 1, graphs=0)
        ggml_type = CACHE_TYPES[cache_type]
        self.k: list[pyggml.Tensor | None] = []      # None: a recurrent layer's
        self.v: list[pyggml.Tensor | None] = []      # None: that, or V read from K
        for i, shape in enumerate(layers):
            if shape.state is not None:              # a recurrent layer's (hybrid.py)
                self.k.append(None)
                self.v.append(None)
                continue
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
        self._placement: Placement | None = None

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
        """The layer's cache tensors: K and V, or K alone where V is read from it (none for
        a recurrent layer)."""
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
        self.sequences = sequences
        for pool in self.pools.values():
            pool.partition(sequences)

    @property
    def sequence_context(self) -> int:
        """Positions one sequence may hold: the cells over the sequences that share them
        (llama.cpp's n_ctx_seq, which decides Phi-3's LongRoPE factors)."""
        return self.size // self.sequences

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

    def start(self, batch: Batch, all_cells: bool = False, streams: bool = False) -> None:
        """Place the batch in free cells of every pool (its graph's cache inputs follow from
        the placement: GraphView.prepare). all_cells: its graph sees every cell (the
        largest graph a batch of its size makes). streams: its graph may attend each
        sequence within its home region, where the batch allows (_streams)."""
        if not in_range(batch.seqs, MAX_SEQS):
            raise ValueError(f"Sequence ids must lie in [0, {MAX_SEQS}), not "
                             f"{sorted(set(batch.seqs.tolist()))}.")
        slots: dict[Window, np.ndarray] = {}
        first: dict[Window, int] = {}
        n_kv: dict[Window, int] = {}
        try:
            for window, pool in self.pools.items():
                slots[window], first[window], n_kv[window] = pool.place(batch, all_cells)
        except CacheFullError:
            for window, taken in slots.items():
                self.pools[window].release(taken)
            raise
        count, groups = (0, ()) if all_cells or not streams else \
            self._streams(batch, first, n_kv)
        self._placement = Placement(batch, slots, n_kv, first, count, groups)

    def _streams(self, batch: Batch, first: dict[Window, int], n_kv: dict[Window, int]
                 ) -> tuple[int, tuple[tuple[int, int, int], ...]]:
        """How many streams the batch's graph attends in (0: none, one range of cells), and
        their groups: its tokens are S >= 2 sequences in order, as many tokens each (a
        batch of decode steps), and in every pool each one's cells lie in its home region.
        Then each sequence's tokens attend its own region's first cells (first and n_kv
        become the first region's start and the cells seen of each), as llama.cpp's cache
        streams do: not the other sequences' cells between. A group is a run of evenly
        spaced sequences (its views are as many regions apart): slots 0 and 3 of 4 are
        one, slots 0, 1 and 3 two (0 and 1; 3). A new request takes the least recently used
        slot, so the active slots need not lie in a row."""
        runs = batch.runs
        t = runs[0][2] - runs[0][1]
        ids = [seq for seq, _, _ in runs]
        if len(ids) < 2 or any(stop - start != t for _, start, stop in runs) or \
                any(b <= a for a, b in zip(ids, ids[1:])):
            return 0, ()
        groups = evenly_spaced(ids)
        if len(groups) > MAX_GROUPS:
            return 0, ()
        reach = {w: pool.stream_cells(ids) for w, pool in self.pools.items()}
        if None in reach.values():
            return 0, ()
        for window, pool in self.pools.items():
            cells = reach[window]
            assert cells is not None                 # none is: see above
            first[window], n_kv[window] = ids[0] * pool.region, cells
        return len(ids), groups

    @property
    def current(self) -> Placement:
        """The batch placed by the last start()."""
        assert self._placement is not None, "start(batch) comes first"
        return self._placement

    @property
    def n_kv(self) -> int:
        """How many of the whole pool's cells the current batch's graph sees."""
        return self.current.n_kv[None]

    # a KV cache drops any range of positions and resumes anywhere; a recurrent state does
    # neither and keeps checkpoints instead (hybrid.py)
    drops_ranges = True

    @property
    def keeps_checkpoints(self) -> bool:
        return False

    def rollback_point(self, seq: int, n: int) -> int:
        """The latest position at or before n that seq may resume at: n itself."""
        return n

    def checkpoint(self, seq: int, position: int) -> bool:
        """A KV cache keeps every position: nothing to keep."""
        return False

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
               block_windows=()) -> GraphView:
        """block_windows: the windows whose masks let an image's rows see each other."""
        placement = self._placement
        if placement is None:
            raise RuntimeError("start(batch) must come before the graph is built.")
        return GraphView(self, ctx, placement, windows, causal, block_windows)


def evenly_spaced(ids: list[int]) -> tuple[tuple[int, int, int], ...]:
    """Increasing ids cut into runs of evenly spaced ones, each (first, count, spacing)."""
    groups, i = [], 0
    while i < len(ids):
        end = i + 1
        spacing = ids[end] - ids[i] if end < len(ids) else 1
        while end < len(ids) and ids[end] - ids[end - 1] == spacing:
            end += 1
        groups.append((ids[i], end - i, spacing))
        i = end
    return tuple(groups)
