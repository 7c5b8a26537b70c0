"""The cells of one pool of a KV cache: which position of which sequences each holds.

A pool is either whole (every layer that attends to the whole context: it holds each
sequence's every position) or a window pool, kept by the layers of one attention window
(a sliding window of n positions, or Llama 4's chunks): it holds window × parallel + batch
cells, as llama.cpp's SWA cache and Ollama's NewSWACache do. A window pool reuses a cell
once no later token of the sequences holding it can see it: when a batch finds too few
free cells, such cells are given up, oldest first, so a pool keeps all it can of each
sequence's recent past (a new prompt that shares a prefix may resume within it, see
holds()).

A decode step's placement searches nothing: a pool counts its free cells and keeps where
the first free one may lie and the span of cells each sequence's lie in (recount()), so
that its cost does not grow with the cache (timed alone, a decode step's placement took 8,
36 and 124 us at 1024, 32768 and 131072 cells when it searched them; it takes 6 at each).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

PAD = 256             # cells a graph sees come in multiples of this (llama.cpp's)
NO_SEQ = 0
MAX_SEQS = 63          # a cell's sequences are bits of an int64
GIVE_UP = 64           # the fewest cells a full window pool frees at once (of 1024+)
# masks compare positions as float32, exact below 2**24 (and a half more below 2**23)
ABSENT = 2.0 ** 30     # a mask's position for a cell not the token's: past all it sees
UNBOUNDED = 2.0 ** 29  # the last position a token sees where attention is not causal

# an attention window (first_seen's): None (the whole context), n positions, or ("chunk", n)
Window = int | tuple[str, int] | None


class CacheFullError(RuntimeError):
    pass


def first_seen(window, position):
    """The first position a token at position sees through window: None (all: 0), n (the
    n positions up to its own), or ("chunk", n) (its chunk of n). Arrays broadcast."""
    if window is None:
        return np.zeros_like(position)
    if isinstance(window, tuple):
        return position // window[1] * window[1]
    return np.maximum(position - window + 1, 0)


def seen_bounds(batch, window, causal: bool = True, blocks: bool = False):
    """float32 (T,) twice: just below the first and just above the last position each token
    of batch sees (a half either way: no cell's position equals a bound), the first None
    where window is None (a token sees back to the start). Causal: up to its own position,
    or, blocks, to its image's last row (an image's rows, one run of one sequence in one
    batch, see each other both ways). Not causal (an encoder): all, and a window n is
    symmetric, n // 2 positions either side (EmbeddingGemma, as llama.cpp's symmetric window
    and transformers' bidirectional one count it). window: as first_seen's."""
    position = batch.positions
    if not causal and window is not None and not isinstance(window, tuple):
        first, last = position - window // 2, position + window // 2
    else:
        first = None if window is None else first_seen(window, position)
        last = np.full(len(position), UNBOUNDED) if not causal else \
            _image_ends(batch) if blocks else position
    return (None if first is None else np.asarray(first, np.float32) - 0.5,
            np.asarray(last, np.float32) + 0.5)


def _image_ends(batch) -> np.ndarray:
    """int64 (T,): each token's position, or the last of its image's (its block's rows of
    its sequence)."""
    last = batch.positions.copy()
    rows = np.flatnonzero(batch.blocks >= 0)
    if len(rows):
        runs, run = np.unique(batch.blocks[rows] * (MAX_SEQS + 1) + batch.seqs[rows],
                              return_inverse=True)
        ends = np.full(len(runs), -1, dtype=np.int64)
        np.maximum.at(ends, run, batch.positions[rows])
        last[rows] = ends[run]
    return last


def span(window) -> int:
    """The most positions a token sees through window."""
    return window[1] if isinstance(window, tuple) else window


def pool_size(window, cells: int, parallel: int, batch: int) -> int:
    """A window pool's cells: each sequence's window and one batch, padded to PAD as
    llama.cpp pads its SWA cache (at most the whole pool's cells)."""
    return min(cells, -(-(span(window) * parallel + batch) // PAD) * PAD)


class Cells:
    """window: None for the whole pool, else the window its layers attend through."""

    def __init__(self, size: int, window: Window = None):
        self.size, self.window = size, window
        # change these only through the methods below (or call recount() after)
        self.pos = np.full(size, -1, dtype=np.int64)
        self.seq = np.zeros(size, dtype=np.int64)          # bit s set: cell belongs to seq s
        self.region = 0                 # cells per sequence's home region (partition())
        self.recount()

    def recount(self) -> None:
        """Take the counts that spare a decode step a search of every cell from pos and seq:
        how many cells are free, the span of cells each sequence's lie in, and below which
        cell (of the pool, of each home region) none is free (a lower bound: place() searches
        from there). Kept up to date by place(), release(), remove() and copy_prefix(), so
        that placing a token costs the same at any number of cells."""
        self._free = int(np.count_nonzero(self.seq == NO_SEQ))
        self._low = 0
        self._home_low: dict[int, int] = {}      # sequence -> lower bound in its home region
        # sequence -> [first, last + 1) of its cells (or wider: release() leaves them)
        self._spans: dict[int, list[int]] = {}
        present = int(np.bitwise_or.reduce(self.seq))
        for seq in (s for s in range(MAX_SEQS) if present >> s & 1):
            self._respan(seq)

    def _respan(self, seq: int, cells: np.ndarray | None = None) -> None:
        """Take seq's span anew (from cells, its cells, where given)."""
        cells = np.flatnonzero((self.seq >> seq) & 1) if cells is None else cells
        if len(cells):
            self._spans[seq] = [int(cells[0]), int(cells[-1]) + 1]
        else:
            self._spans.pop(seq, None)

    def partition(self, sequences: int) -> None:
        """Give each of sequences a home region of cells, aligned to 256, that place() fills
        first. A sequence's cells then sit at the same offsets whoever else is in the pool,
        so the attention sums group their terms the same way (see docs/runner.md). One
        sequence's region would be the whole pool, which the first free cells are anyway."""
        self.region = (self.size // sequences) // PAD * PAD if sequences > 1 else 0
        self._home_low = {}

    def cells(self, seq: int, p0: int = 0, p1: int | None = None) -> np.ndarray:
        """Boolean mask of the cells holding positions [p0, p1) of seq (p1 None: to the end)."""
        hit = ((self.seq >> seq) & 1).astype(bool) & (self.pos >= p0)
        if p1 is not None:
            hit &= self.pos < p1
        return hit

    def used(self, seq: int) -> int:
        return int(np.count_nonzero(self.cells(seq)))

    def holds(self, seq: int, n: int) -> bool:
        """Whether a token of seq at position n would see all it should of positions [0, n):
        always in the whole pool, and in a window pool while the cells of its window are
        still held (the prompt-cache rule: a prefix of n tokens resumes only then)."""
        first = int(first_seen(self.window, n)) if n > 0 else 0
        return np.count_nonzero(self.cells(seq, first, n)) == n - first

    def place(self, batch, all_cells: bool = False) -> tuple[np.ndarray, int, int]:
        """Take cells for the batch's tokens: the first free ones, each sequence's in its home
        region first (partition()). Returns them, and the first cell and how many its graph
        sees: from the first to the last of the batch's sequences' cells (this batch's
        included), in whole blocks of PAD; all_cells: every cell."""
        n = len(batch)
        if self.window is not None and self._free < n:
            self._give_up(batch, n - self._free)
        if self._free < n:
            raise CacheFullError(f"The KV cache has {self._free} free cells; the batch needs "
                                 f"{n}.")
        taken = self._lone_cell(batch) if n == 1 and not self.region else None
        slots, first, end = taken or self._take(batch)
        if all_cells:
            return slots, 0, self.size
        first = first // PAD * PAD
        return slots, first, min(self.size - first, -(-(end - first) // PAD) * PAD)

    def _take(self, batch) -> tuple[np.ndarray, int, int]:
        """Take the first free cells for the batch (each sequence's in its home region
        first); them, and the span of all the batch's sequences' cells."""
        if self.region:
            slots = self._home_cells(batch)
        else:
            slots, self._low = self._first_free(len(batch), self._low, self.size)
        self.pos[slots] = batch.positions
        self.seq[slots] = 1 << batch.seqs.astype(np.int64)
        self._free -= len(batch)
        first, end = self.size, 0
        for seq, start, stop in batch.runs:
            cells = slots[start:stop]
            low, high = (int(cells[0]),) * 2 if stop - start == 1 else \
                (int(cells.min()), int(cells.max()))
            span = self._widen(seq, low, high + 1)
            first, end = min(first, span[0]), max(end, span[1])
        return slots, first, end

    def _lone_cell(self, batch) -> tuple[np.ndarray, int, int] | None:
        """_take for a decode step's one token, where the first free cell is the bound
        below which none is free, in Python's own integers: right after a compute, whose
        weights evicted numpy's code from the caches, each numpy call of the general path
        costs 10-15 times what it costs warm. None where that cell is taken."""
        cell, seq = self._low, int(batch.seqs[0])
        if cell >= self.size or self.seq[cell] != NO_SEQ:
            return None
        self.pos[cell], self.seq[cell] = int(batch.positions[0]), 1 << seq
        self._low, self._free = cell + 1, self._free - 1
        first, end = self._widen(seq, cell, cell + 1)
        return np.array([cell]), first, end

    def _widen(self, seq: int, low: int, end: int) -> list[int]:
        """seq's span [first, end) of cells, widened to cells [low, end)."""
        span = self._spans.setdefault(seq, [self.size, 0])
        span[0], span[1] = min(span[0], low), max(span[1], end)
        return span

    def stream_cells(self, seqs: list[int]) -> int | None:
        """How many cells of each home region a graph must see to attend each of seqs
        within its own region, as a stream of its own: the most any of them has reached, in
        blocks of PAD; None where the pool has no regions or a sequence's cells
        do not all lie in its region (it overflowed, or shares another's: a fork)."""
        if not self.region:
            return None
        reach = PAD
        for seq in seqs:
            home = seq * self.region
            first, end = self._spans.get(seq, (home, home))
            if first < home or end > min(home + self.region, self.size):
                return None
            reach = max(reach, -(-(end - home) // PAD) * PAD)
        return reach

    def _first_free(self, n: int, low: int, end: int) -> tuple[np.ndarray, int]:
        """The first n free cells of [low, end), where no cell before low is free (fewer
        where there are fewer), and the new such bound. A decode step finds its cell at the
        bound, without a search."""
        block = self.seq[low:min(low + n, end)]
        if len(block) == n and not block.any():
            return np.arange(low, low + n), low + n
        found = low + np.flatnonzero(self.seq[low:end] == NO_SEQ)[:n]
        return found, int(found[-1]) + 1 if len(found) == n else end

    def _give_up(self, batch, needed: int) -> None:
        """Free at least needed cells (where there are as many; GIVE_UP at once, so that
        decode steps do not each search) among those no sequence holding them will see
        again, oldest first: a sequence of the batch sees from its first token's window on,
        any other from its next token's (one past the last position it holds), as
        llama.cpp's SWA cache reuses cells."""
        stale = self.seq != NO_SEQ
        present = int(np.bitwise_or.reduce(self.seq))
        for seq in (s for s in range(MAX_SEQS) if present >> s & 1):
            mine = ((self.seq >> seq) & 1).astype(bool)
            rows = batch.seqs == seq
            upcoming = batch.positions[rows].min() if rows.any() else self.pos[mine].max() + 1
            stale &= ~mine | (self.pos < first_seen(self.window, upcoming))
        cells = np.flatnonzero(stale)
        count = max(needed, min(GIVE_UP, self.size // 16))
        self.release(cells[np.argsort(self.pos[cells], kind="stable")][:count])

    def _home_cells(self, batch) -> np.ndarray:
        """Free cells for the batch, each sequence's from its home region first (taken at
        once, so that the next run's search passes them by), in the sequences' order."""
        slots = np.empty(len(batch), dtype=np.int64)
        for seq, start, stop in sorted(batch.runs):
            n, home, end = stop - start, seq * self.region, min((seq + 1) * self.region, self.size)
            found, self._home_low[seq] = self._first_free(
                n, self._home_low.get(seq, home), end) if home < end else (slots[:0], end)
            if len(found) < n:                           # a full region: others' cells too
                free = self.seq == NO_SEQ
                free[found] = False
                found = np.concatenate([found, np.flatnonzero(free)[:n - len(found)]])
            slots[start:stop] = found
            self.seq[found] = 1 << seq
        return slots

    def release(self, slots: np.ndarray) -> None:
        """Empty cells place() took (a batch that will not be computed)."""
        freed = slots[self.seq[slots] != NO_SEQ]
        self.seq[slots], self.pos[slots] = NO_SEQ, -1
        self._freed(freed)

    def _freed(self, cells: np.ndarray) -> None:
        """Count cells that were used and are free now (the spans may stay wider)."""
        if len(cells):
            self._free += len(np.unique(cells))
            self._low = min(self._low, int(cells.min()))
            self._home_low = {}              # each home region is searched from its start

    def positions_into(self, seqs: np.ndarray, out: np.ndarray, first: int = 0,
                       apart: int = 0) -> None:
        """Write into out, float32 (len(seqs), n_kv), for each sequence of seqs, the position
        each of the n_kv cells from first on holds of it, else ABSENT (the cell is empty or
        another's): a mask's cell side (see seen_bounds). apart > 0: each sequence's row
        is of the n_kv cells from its own first, apart cells after the last row's (streams)."""
        pos, seq = self._rows(first, out.shape, apart)
        bits = 1 << int(seqs[0]) if len(seqs) == 1 else \
            np.left_shift(1, seqs.astype(np.int64))[:, None]                     # (S, 1)
        out.fill(ABSENT)
        np.copyto(out, pos, casting="unsafe", where=seq & bits != 0)

    def _rows(self, first: int, shape: tuple[int, int], apart: int):
        """pos and seq of the n_kv cells from first on, or (apart > 0) (S, n_kv) views of S
        rows of them, each apart cells after the last (no copy)."""
        rows, n_kv = shape
        if not apart:
            return self.pos[first:first + n_kv], self.seq[first:first + n_kv]
        if first + (rows - 1) * apart + n_kv > self.size:
            raise ValueError(f"{rows} rows of {n_kv} cells, {apart} apart from cell {first}, "
                             f"run past the pool's {self.size} cells.")
        return tuple(as_strided(array[first:], shape, (apart * array.itemsize, array.itemsize),
                                writeable=False) for array in (self.pos, self.seq))

    def remove(self, seq: int, p0: int = 0, p1: int | None = None) -> None:
        """Drop positions [p0, p1) of seq (p1 None: to the end)."""
        hit = self.cells(seq, p0, p1)
        self.seq[hit] &= ~(1 << seq)
        freed = np.flatnonzero(hit & (self.seq == NO_SEQ))
        self.pos[freed] = -1
        self._freed(freed)
        self._respan(seq)

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """Let dst share src's cells for positions [0, n)."""
        self.remove(dst)
        shared = np.flatnonzero(self.cells(src, 0, n))
        self.seq[shared] |= 1 << dst
        self._respan(dst, shared)

    def positions_of(self, seq: int) -> np.ndarray:
        return np.sort(self.pos[self.cells(seq)])
