"""Window pools: their size, which cells they give up and when, the resume rule, and the
cache's layers keeping tensors of their pool's size."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
from runner.engine.batch import Batch
from runner.kvcache import CausalCache, LayerShape
from runner.kvcache.cells import CacheFullError, Cells, first_seen, pool_size


@pytest.fixture(scope="module")
def backend():
    return pyggml.cpu_backend(threads=1)


def test_a_window_pool_holds_each_sequences_window_and_one_batch_padded():
    assert pool_size(128, 32768, 1, 512) == 768            # gpt-oss: 640 padded to 256
    assert pool_size(1024, 32768, 4, 512) == 4608          # Gemma 3 27B, 4 sequences
    assert pool_size(("chunk", 8192), 32768, 1, 512) == 8704
    assert pool_size(4096, 4096, 1, 512) == 4096           # never more than the whole pool


def test_first_seen_counts_windows_and_chunks():
    positions = np.array([0, 5, 7, 8, 20])
    assert first_seen(None, positions).tolist() == [0] * 5
    assert first_seen(8, positions).tolist() == [0, 0, 0, 1, 13]
    assert first_seen(("chunk", 8), positions).tolist() == [0, 0, 0, 8, 16]


def test_cells_are_given_up_only_when_needed_and_oldest_first():
    pool = Cells(20, window=4)
    pool.place(Batch.of_sequence(list(range(12)), 0))                 # positions 0..11
    slots, _, _ = pool.place(Batch.of_sequence([1] * 8, 12))             # 8 free: none given up
    assert pool.positions_of(0).tolist() == list(range(20))
    slots, _, _ = pool.place(Batch.of_sequence([1] * 3, 20))
    # position 20 sees 17..20: the three oldest (0, 1, 2) make room
    assert pool.positions_of(0).tolist() == list(range(3, 23))
    assert sorted(slots.tolist()) == [0, 1, 2]
    with pytest.raises(Exception, match="free cells"):     # 17 out of sight (3..19), not 18
        pool.place(Batch.of_sequence([1] * 18, 23))


def test_the_resume_rule_needs_the_window_before_the_prefix():
    pool = Cells(24, window=4)
    for start in range(0, 40, 8):
        pool.place(Batch.of_sequence([1] * 8, start))                # holds 16..39
    assert pool.positions_of(0).min() == 16
    assert pool.holds(0, 40) and pool.holds(0, 25) and pool.holds(0, 19)
    assert not pool.holds(0, 18)                   # 15 is gone: evaluate again from 0
    assert pool.holds(0, 0)
    whole = Cells(64)
    whole.place(Batch.of_sequence([1] * 10, 0))
    assert whole.holds(0, 5) and whole.holds(0, 10)


def test_a_cell_is_reused_once_no_sequence_holding_it_sees_it():
    pool = Cells(12, window=2)
    pool.place(Batch.of_sequence([1] * 6, 0))
    pool.copy_prefix(0, 1, 6)                                        # a fork: 6 shared cells
    pool.place(Batch.of_sequence([1] * 6, 6, seq=0))                 # the last 6 free ones
    slots, _, _ = pool.place(Batch.of_sequence([1] * 2, 12, seq=0))
    # seq 0 sees 11 on; seq 1, not in the batch, would see 5 on: 0 and 1 go first
    assert sorted(pool.pos[slots].tolist()) == [12, 13] and sorted(slots.tolist()) == [0, 1]
    assert pool.positions_of(1).tolist() == [2, 3, 4, 5]
    pool.place(Batch.of_sequence([1] * 2, 6, seq=1))                # seq 1 goes on: 2, 3 go
    assert pool.positions_of(1).tolist() == [4, 5, 6, 7]
    with pytest.raises(Exception, match="free cells"):  # all but 13 (0's) and 7 (1's) go
        pool.place(Batch.of_sequence([1] * 11, 14, seq=0))


def test_sliding_layers_keep_tensors_of_their_pool(backend):
    shapes = [LayerShape(2, 8, 8, window=16), LayerShape(2, 8, 8),
              LayerShape(2, 8, 8, window=("chunk", 32))]
    kv = CausalCache(shapes, 4096, backend, "f16", True, window_cells=(2, 64))
    assert {w: p.size for w, p in kv.pools.items()} == {None: 4096, 16: 256,
                                                         ("chunk", 32): 256}
    assert [t.shape[0] for t in kv.k] == [256, 4096, 256]
    full = CausalCache(shapes, 4096, backend, "f16", True)          # --swa-full
    assert list(full.pools) == [None] and [t.shape[0] for t in full.k] == [4096] * 3
    assert sum(b.size for b in kv.buffers) < sum(b.size for b in full.buffers) * 0.4
    for start in range(0, 300, 60):
        kv.start(Batch.of_sequence(list(range(60)), start))
    assert kv.current.n_kv == {None: 512, 16: 256, ("chunk", 32): 256}


def test_a_batch_that_does_not_fit_leaves_the_pools_as_they_were(backend):
    shapes = [LayerShape(1, 8, 8, window=4), LayerShape(1, 8, 8)]
    kv = CausalCache(shapes, 300, backend, "f16", True, window_cells=(1, 8))
    kv.start(Batch.of_sequence([1] * 250, 0))
    with pytest.raises(Exception, match="free cells"):
        kv.start(Batch.of_sequence([1] * 60, 250))      # the window pool has room, not all
    assert kv.used(0) == 250 and kv.pools[4].used(0) == 250


def test_a_layer_attending_through_another_window_is_an_error(backend):
    shapes = [LayerShape(1, 8, 8, window=4), LayerShape(1, 8, 8)]
    kv = CausalCache(shapes, 1024, backend, "f16", True, window_cells=(1, 8))
    kv.start(Batch.of_sequence([1, 2], 0))
    with pyggml.Context(max_tensors=64) as ctx:
        view = kv.inputs(ctx, windows=(None, 4))
        assert view.mask(4, layer=0) is view.masks[4]
        with pytest.raises(ValueError, match="Layer 0 keeps its cells for window 4 but "
                                             "attends through window None"):
            view.mask(None, layer=0)


def searched_cells(pool: Cells, batch) -> list:
    """The cells place() should take for batch, found by searching every cell (as place()
    did before it kept counts): the first free ones, or with home regions each sequence's
    first free cells in its region, then the first free ones anywhere."""
    free = pool.seq == 0
    slots = np.flatnonzero(free)[:len(batch)]
    for seq in np.unique(batch.seqs) if pool.region else ():
        rows = np.flatnonzero(batch.seqs == seq)
        home = np.zeros(pool.size, dtype=bool)
        home[seq * pool.region:(seq + 1) * pool.region] = True
        found = np.flatnonzero(free & home)[:len(rows)]
        others = np.flatnonzero(free & ~np.isin(np.arange(pool.size), found))
        found = np.concatenate([found, others[:len(rows) - len(found)]])
        slots[rows] = found
        free[found] = False
    return slots.tolist()


@pytest.mark.parametrize("regions", [1, 3])
def test_placing_by_the_kept_counts_takes_the_cells_a_search_would(regions):
    """Random prompts, decode steps, removals, forks and refusals: every placement takes the
    cells a search of the whole pool takes, its graph sees all its sequences' cells, and the
    kept counts match a recount."""
    rng = np.random.default_rng(regions)
    pool = Cells(1536)
    pool.partition(regions)
    ends = {s: 0 for s in range(4)}                      # next position of each sequence
    for _ in range(400):
        action = rng.choice(["decode", "prompt", "remove", "fork", "drop"],
                            p=[.6, .15, .1, .05, .1])
        if action in ("decode", "prompt"):
            seqs = rng.choice(4, size=rng.integers(1, 4), replace=False) if action == "decode" \
                else [int(rng.integers(4))] * int(rng.integers(2, 300))
            positions = []
            for seq in seqs:
                positions.append(ends[seq])
                ends[seq] += 1
            batch = Batch(np.zeros(len(seqs)), positions, seqs)
            if np.count_nonzero(pool.seq == 0) < len(batch):
                with pytest.raises(CacheFullError):
                    pool.place(batch)
                for seq in set(np.asarray(seqs).tolist()):
                    ends[seq] = pool.positions_of(seq).max() + 1 if pool.used(seq) else 0
                continue
            expected = searched_cells(pool, batch)
            slots, first, n_kv = pool.place(batch)
            assert slots.tolist() == expected
            # the graph sees whole blocks holding every cell of the batch's sequences
            cells = np.flatnonzero(np.isin(pool.seq & np.bitwise_or.reduce(1 << batch.seqs), 0,
                                           invert=True))
            assert first % 256 == 0 and (n_kv % 256 == 0 or first + n_kv == pool.size)
            assert first <= cells.min() and cells.max() < first + n_kv
        elif action == "remove":
            seq = int(rng.integers(4))
            ends[seq] = int(rng.integers(0, ends[seq] + 1))
            pool.remove(seq, ends[seq])
        elif action == "fork":
            src, dst = rng.choice(4, size=2, replace=False)
            n = int(rng.integers(0, ends[src] + 1))
            pool.copy_prefix(int(src), int(dst), n)
            ends[dst] = n
        else:
            taken = np.flatnonzero(pool.seq != 0)
            pool.release(rng.choice(taken, size=min(len(taken), 5), replace=False))
            ends = {s: pool.positions_of(s).max() + 1 if pool.used(s) else 0 for s in ends}
        free = pool._free
        spans = {seq: tuple(span) for seq, span in pool._spans.items()}
        pool.recount()
        assert free == pool._free
        for seq, (first, end) in pool._spans.items():       # kept ones may be wider
            assert spans[seq][0] <= first and end <= spans[seq][1]


def test_rows_of_cells_apart_are_read_within_the_pool():
    """Streams' rows of positions (each apart cells after the last): a row that would run
    past the pool's cells is an error, not a read of other memory."""
    pool = Cells(1024)
    pool.partition(4)                                    # regions of 256
    for seq in range(4):
        pool.place(Batch.of_sequence([1] * 3, 10 * seq, seq=seq))
    out = np.empty((2, 256), np.float32)
    pool.positions_into(np.array([1, 3]), out, first=256, apart=512)
    assert out[0, :3].tolist() == [10, 11, 12] and out[1, :3].tolist() == [30, 31, 32]
    assert (out[:, 3:] == out[0, 3]).all() and out[0, 3] > 1e9            # ABSENT
    with pytest.raises(ValueError, match="run past the pool's 1024 cells"):
        pool.positions_into(np.array([1, 3]), np.empty((2, 257), np.float32), 256, 512)
