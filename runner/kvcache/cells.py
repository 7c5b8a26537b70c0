"""The cells of one pool of a KV cache: which position of which sequences each holds.

A pool is either whole (every layer that attends to the whole context: it holds each
sequence's every position) or a window pool, kept by the layers of one attention window
(a sliding window of n positions, or Llama 4's chunks): it holds window × parallel + batch
cells, as llama.cpp's SWA cache and Ollama's NewSWACache do. A window pool reuses a cell
once no later token of the sequences holding it can see it: when a batch finds too few
free cells, such cells are given up, oldest first, so a pool keeps all it can of each
sequence's recent past (a new prompt that shares a prefix may resume within it, see
holds()).
"""

from __future__ import annotations

import numpy as np

PAD = 256             # cells a graph sees come in multiples of this (llama.cpp's)
NO_SEQ = 0
MAX_SEQS = 63          # a cell's sequences are bits of an int64
GIVE_UP = 64           # the fewest cells a full window pool frees at once (of 1024+)
# masks compare positions as float32, exact below 2**24 (and a half more below 2**23)
ABSENT = 2.0 ** 30     # a mask's position for a cell not the token's: past all it sees
UNBOUNDED = 2.0 ** 29  # the last position a token sees where attention is not causal


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

    def __init__(self, size: int, window=None):
        self.size, self.window = size, window
        self.pos = np.full(size, -1, dtype=np.int64)
        self.seq = np.zeros(size, dtype=np.int64)          # bit s set: cell belongs to seq s
        self.region = 0                 # cells per sequence's home region (partition())

    def partition(self, sequences: int) -> None:
        """Give each of sequences a home region of cells, aligned to 256, that place() fills
        first. A sequence's cells then sit at the same offsets whoever else is in the pool,
        so the attention sums group their terms the same way (see docs/runner.md). One
        sequence's region would be the whole pool, which the first free cells are anyway."""
        self.region = (self.size // sequences) // PAD * PAD if sequences > 1 else 0

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

    def place(self, batch, all_cells: bool = False) -> tuple[np.ndarray, int]:
        """Take cells for the batch's tokens; returns them and how many cells its graph sees
        (all_cells: all of them)."""
        n = len(batch)
        free = self.seq == NO_SEQ
        if self.window is not None and np.count_nonzero(free) < n:
            self._give_up(batch, n - np.count_nonzero(free))
            free = self.seq == NO_SEQ
        slots = np.flatnonzero(free)[:n]
        if len(slots) < n:
            raise CacheFullError(f"The KV cache has {len(slots)} free cells; the batch needs "
                                 f"{n}.")
        if self.region:
            slots = self._home_cells(batch, free)
        # the graph sees every cell up to the last one used, this batch's included (the
        # last used one: the last False of free; all True has argmin 0, a free cell)
        last = len(free) - 1 - int(free[::-1].argmin())
        last = max(-1 if free[last] else last, int(slots.max()))
        self.pos[slots] = batch.positions
        self.seq[slots] = 1 << batch.seqs.astype(np.int64)
        return slots, self.size if all_cells else min(self.size, -(-(last + 1) // PAD) * PAD)

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

    def release(self, slots: np.ndarray) -> None:
        """Empty cells place() took (a batch that will not be computed)."""
        self.seq[slots], self.pos[slots] = NO_SEQ, -1

    def positions_into(self, seqs: np.ndarray, out: np.ndarray) -> None:
        """Write into out, float32 (len(seqs), n_kv), for each sequence of seqs, the position
        each of the first n_kv cells holds of it, else ABSENT (the cell is empty or
        another's): a mask's cell side (see seen_bounds)."""
        n_kv = out.shape[1]
        bits = 1 << int(seqs[0]) if len(seqs) == 1 else \
            np.left_shift(1, seqs.astype(np.int64))[:, None]                     # (S, 1)
        out.fill(ABSENT)
        np.copyto(out, self.pos[:n_kv], casting="unsafe", where=self.seq[:n_kv] & bits != 0)

    def remove(self, seq: int, p0: int = 0, p1: int | None = None) -> None:
        """Drop positions [p0, p1) of seq (p1 None: to the end)."""
        self.seq[self.cells(seq, p0, p1)] &= ~(1 << seq)
        self.pos[self.seq == NO_SEQ] = -1

    def copy_prefix(self, src: int, dst: int, n: int) -> None:
        """Let dst share src's cells for positions [0, n)."""
        self.remove(dst)
        self.seq[self.cells(src, 0, n)] |= 1 << dst

    def positions_of(self, seq: int) -> np.ndarray:
        return np.sort(self.pos[self.cells(seq)])
