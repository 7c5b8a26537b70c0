"""The state cells of a recurrent layer (kvcache/states.py): which state each batch reads
and writes, what a sequence may resume at, checkpoints within their bound, forks."""

import pytest

from runner.kvcache.states import ZERO, StateCells


def test_a_batch_reads_the_state_it_continues_and_writes_a_fresh_cell():
    cells = StateCells(sequences=2, checkpoints=1)
    (src,), (first,) = cells.place([(0, 0, 5)])
    assert src == ZERO and first != ZERO
    (src,), (second,) = cells.place([(0, 5, 6)])
    assert src == first and second not in (ZERO, first)
    assert cells.positions(0) == [0, 5, 6]         # the newest and the one before


def test_a_sequence_continues_only_where_its_state_is():
    cells = StateCells(sequences=1, checkpoints=0)
    cells.place([(0, 0, 4)])
    with pytest.raises(ValueError, match="resumes only where its state was left"):
        cells.place([(0, 3, 5)])


def test_older_states_go_but_checkpoints_stay_within_their_bound():
    cells = StateCells(sequences=1, checkpoints=2)
    for start in range(0, 8):
        cells.place([(0, start, start + 1)])
        if start + 1 in (2, 4, 6):
            assert cells.mark(0, start + 1)
    assert cells.positions(0) == [0, 4, 6, 7, 8]   # 2 went: two checkpoints at most
    assert cells.rollback_point(0, 5) == 4
    cells.truncate(0, 4)
    assert cells.positions(0) == [0, 4]
    assert sum(1 for refs in cells.refs if refs) == 2        # the zero cell and 4's


def test_a_fork_shares_a_cell_until_both_let_it_go():
    cells = StateCells(sequences=2, checkpoints=1)
    (_,), (cell,) = cells.place([(0, 0, 3)])
    cells.fork(0, 1, 3)
    assert cells.refs[cell] == 2 and cells.holds(1, 3)
    cells.truncate(0, 0)
    assert cells.refs[cell] == 1
    with pytest.raises(ValueError, match="no recurrent state at position 2"):
        cells.fork(1, 0, 2)


def test_the_cells_suffice_for_every_sequence_at_its_bound():
    cells = StateCells(sequences=3, checkpoints=2)
    for step in range(20):
        for seq in range(3):
            cells.place([(seq, step, step + 1)])
            cells.mark(seq, step + 1)
    assert all(cells.positions(seq) == [0, 19, 20] for seq in range(3))   # no cell ran out
