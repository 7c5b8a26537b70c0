"""The causal cache's bookkeeping: placing batches, sequences sharing cells, masks, regions."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
from runner.engine.batch import Batch
from runner.kvcache import CausalCache, LayerShape
from runner.kvcache.causal import CacheFullError, check_cache_type
from runner.kvcache.graph_view import GraphView, Placement


@pytest.fixture(scope="module")
def backend():
    return pyggml.cpu_backend(threads=1)


def cache(backend, cells=1024, flash=True):
    return CausalCache([LayerShape(2, 8, 8)] * 2, cells, backend, "f16", flash)


def test_batches_take_free_cells_and_removal_frees_them(backend):
    kv = cache(backend)
    kv.start(Batch.of_sequence([1, 2, 3], 0, seq=0))
    kv.start(Batch.of_sequence([4, 5], 0, seq=1))
    assert kv.used(0) == 3 and kv.used(1) == 2
    assert kv.positions_of(1).tolist() == [0, 1]
    kv.remove(0, 1)
    assert kv.positions_of(0).tolist() == [0] and kv.used(1) == 2
    kv.start(Batch.of_sequence([6, 7], 1, seq=0))        # reuses the freed cells
    assert int(np.flatnonzero(kv.seq != 0).max()) < 5


def test_the_graph_sees_cells_up_to_the_last_used_one_padded_to_256(backend):
    kv = cache(backend, cells=1024)
    kv.start(Batch.of_sequence([1], 0))                            # an empty cache
    assert kv.n_kv == 256
    kv.start(Batch.of_sequence(list(range(299)), 1))               # cells 0..299
    assert kv.n_kv == 512
    kv.remove(0, 10)                                               # only 0..9 stay
    kv.start(Batch.of_sequence([5], 10))
    assert kv.n_kv == 256
    kv.start(Batch.of_sequence([6], 0, seq=1), all_cells=True)
    assert kv.n_kv == 1024
    kv.partition(4)                                                # homes at 0, 256, 512, 768
    kv.start(Batch([1, 2], [0, 0], [3, 1]))                        # seq 3's cell: 768
    assert kv.n_kv == 1024
    kv.remove(3)
    kv.start(Batch.of_sequence([3], 1, seq=1))                     # last used: seq 1's 257
    assert kv.n_kv == 512


def test_copy_prefix_shares_cells_and_a_shift_moves_positions(backend):
    kv = cache(backend)
    kv.start(Batch.of_sequence(list(range(10)), 0, seq=0))
    kv.copy_prefix(0, 2, 6)
    shared = kv.cells(0, 0, 6) & kv.cells(2)
    assert shared.sum() == 6 and kv.used(2) == 6
    kv.remove(0)
    assert kv.used(2) == 6 and kv.used(0) == 0         # dropping one owner keeps the other
    kv.move(2, 3, None, -1)
    assert kv.positions_of(2).tolist() == [0, 1, 2, 2, 3, 4]


def computed_mask(kv, batch, n_kv: int, window, causal: bool = True, blocks: bool = False):
    """The mask a graph computes for batch over the first n_kv cells as they stand (float16
    with flash attention, float32 without)."""
    placement = Placement(batch, {None: np.zeros(len(batch), np.int64)}, {None: n_kv})
    with pyggml.Context(max_tensors=64, graph_size=64) as ctx, \
            pyggml.Scheduler([pyggml.cpu_backend(threads=1)]) as scheduler:
        view = GraphView(kv, ctx, placement, (window,), causal, (window,) if blocks else ())
        mask = view.mask(window)
        graph = ctx.graph(mask, *view.slots.values())
        scheduler.alloc(graph)
        view.prepare(placement)
        view.feed()
        scheduler.compute_async(graph).wait()
        return mask.numpy(copy=True)


def test_mask_sees_own_earlier_positions_and_a_window(backend):
    kv = cache(backend, flash=False)
    kv.start(Batch(list(range(4)) + [9, 9], [0, 1, 2, 3, 0, 1], [0, 0, 0, 0, 1, 1]))
    mask = computed_mask(kv, Batch([0, 0], [3, 1], [0, 1]), kv.n_kv, None)
    assert mask.dtype == np.float32
    assert (mask[0, :4] == 0).all() and np.isneginf(mask[0, 4:]).all()
    assert (mask[1, 4:6] == 0).all() and np.isneginf(mask[1, :4]).all()
    windowed = computed_mask(kv, Batch([0], [3], [0]), kv.n_kv, 2)
    assert (windowed[0, 2:4] == 0).all() and np.isneginf(windowed[0, :2]).all()
    encoder = computed_mask(kv, Batch([0], [1], [0]), kv.n_kv, 2, causal=False)  # 1 each side
    assert (encoder[0, :3] == 0).all() and np.isneginf(encoder[0, 3:]).all()


def visible_by_rule(kv, batch, n_kv, window, causal, blocks) -> np.ndarray:
    """The mask's rule, cell by cell."""
    out = np.zeros((len(batch), n_kv), dtype=bool)
    for t, (p, s, b) in enumerate(zip(batch.positions, batch.seqs, batch.blocks)):
        last = p
        if blocks and b >= 0:                  # its image's rows of its sequence
            last = max(q for q, s2, b2 in zip(batch.positions, batch.seqs, batch.blocks)
                       if s2 == s and b2 == b)
        for c in range(n_kv):
            pos, mine = kv.pos[c], (kv.seq[c] >> s) & 1
            seen = pos <= last or not causal
            if isinstance(window, tuple):
                seen = seen and pos >= p // window[1] * window[1]
            elif window is not None and not causal:           # an encoder's: both sides
                seen = seen and abs(pos - p) <= window // 2
            elif window is not None:
                seen = seen and pos > p - window
            out[t, c] = mine and pos >= 0 and seen
    return out


@pytest.mark.parametrize("seqs", [1, 3])
@pytest.mark.parametrize("flash", [True, False])
def test_mask_follows_its_rule_cell_by_cell(backend, seqs, flash):
    """Random cache states (shared cells, empty cells, images), every kind of mask, against
    the rule written out cell by cell; float16 for flash attention."""
    rng = np.random.default_rng(seqs)
    kv = cache(backend, cells=64, flash=flash)
    kv.pos[:] = rng.integers(-1, 40, 64)
    kv.seq[:] = np.where(kv.pos >= 0, rng.integers(1, 1 << seqs, 64), 0)
    batch = Batch(np.zeros(12), rng.integers(0, 45, 12), rng.integers(0, seqs, 12),
                  blocks=rng.integers(-1, 3, 12))
    for window in (None, 5, ("chunk", 8)):
        for causal in (True, False):
            for blocks in (False, True):
                expected = visible_by_rule(kv, batch, 64, window, causal, blocks)
                mask = computed_mask(kv, batch, 64, window, causal, blocks)
                assert mask.dtype == (np.float16 if flash else np.float32)
                np.testing.assert_array_equal(mask == 0, expected)
                assert np.isneginf(mask[~expected]).all()


def test_an_images_rows_see_each_other_where_blocks_count(backend):
    kv = cache(backend, flash=False)
    # positions 0-1 text, 2-4 an image (block 7), 5 text; sequence 1 holds the same block id
    batch = Batch([5, 6, 0, 0, 0, 8, 5, 0], [0, 1, 2, 3, 4, 5, 0, 1],
                  [0, 0, 0, 0, 0, 0, 1, 1], blocks=[-1, -1, 7, 7, 7, -1, -1, 7])
    kv.start(batch)
    causal = computed_mask(kv, batch, kv.n_kv, None)
    both = computed_mask(kv, batch, kv.n_kv, None, blocks=True)
    assert np.isinf(causal[2, 3:5]).all() and np.isfinite(both[2, 2:5]).all()
    assert np.isinf(both[2, 5]) and np.isinf(both[1, 2])        # text stays causal
    assert np.isinf(both[2, 6:8]).all()                         # another sequence's block
    windowed = computed_mask(kv, batch, kv.n_kv, 2, blocks=True)
    assert np.isfinite(windowed[3, 2:5]).all() and np.isinf(windowed[4, 2])


def test_a_mask_tells_apart_the_sequences_of_a_batch_and_shapes_its_graph(backend):
    """A batch of several sequences reads one row of cell positions per sequence; how many
    is part of the graph's shape, as the cells seen are."""
    kv = cache(backend, cells=512)
    kv.start(Batch.of_sequence(list(range(300)), 0, seq=0))
    one = kv.current.shape
    kv.start(Batch([1, 2, 3], [300, 0, 0], [0, 1, 2]))        # three sequences
    assert kv.current.shape == ((0, 512), 3, 0, ()) and one == ((0, 512), 1, 0, ())
    ids, rows = kv.current.sequences
    assert ids.tolist() == [0, 1, 2] and rows.tolist() == [0, 1, 2]
    mask = computed_mask(kv, kv.current.batch, kv.n_kv, None)
    assert (mask[0, :301] == 0).all() and np.isneginf(mask[0, 301:]).all()
    assert (mask[1] == 0).sum() == 1 and (mask[2] == 0).sum() == 1


def test_partition_places_each_sequence_in_its_home_region(backend):
    kv = cache(backend, cells=1024)
    kv.partition(4)
    assert kv.region == 256
    kv.start(Batch([1, 2, 3, 4], [0, 0, 1, 1], [2, 3, 2, 3]))
    assert sorted(np.flatnonzero(kv.cells(2)).tolist()) == [512, 513]
    assert sorted(np.flatnonzero(kv.cells(3)).tolist()) == [768, 769]
    kv.start(Batch.of_sequence(list(range(300)), 2, seq=2))    # overflows its region
    assert kv.used(2) == 302 and len(set(np.flatnonzero(kv.cells(2)).tolist())) == 302


def test_a_full_cache_and_bad_sequence_ids_are_refused(backend):
    kv = cache(backend, cells=8)
    with pytest.raises(CacheFullError, match="8 free cells; the batch needs 9"):
        kv.start(Batch.of_sequence(list(range(9)), 0))
    with pytest.raises(ValueError, match="Sequence ids"):
        kv.start(Batch.of_sequence([1], 0, seq=63))


def test_cache_types_are_checked():
    check_cache_type("q8_0", True)
    with pytest.raises(ValueError, match="needs flash attention"):
        check_cache_type("q4_0", False)
    with pytest.raises(ValueError, match="Unknown KV cache type"):
        check_cache_type("q3", True)


@pytest.mark.parametrize("window", [None, 4096, ("chunk", 8192)])
def test_masks_are_exact_at_positions_of_millions(backend, window):
    """The masks compare positions as float32 (exact below 2**24, halves below 2**23): at
    positions of a long context the rule holds to the last cell."""
    kv = cache(backend, cells=64)
    start = 8_000_000
    kv.pos[:] = start + np.arange(64) * 97 % 9000           # spread over 9000 positions
    kv.seq[:] = 1
    batch = Batch(np.zeros(6), start + np.array([0, 1, 4095, 4096, 4097, 8999]), np.zeros(6))
    expected = visible_by_rule(kv, batch, 64, window, True, False)
    mask = computed_mask(kv, batch, 64, window)
    np.testing.assert_array_equal(mask == 0, expected)
    assert 0 < expected.sum() < expected.size
