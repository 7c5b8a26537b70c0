"""A batch's runs of one sequence's tokens, found in Python for a few rows and with numpy
for many: the same runs either way."""

from __future__ import annotations

import numpy as np
import pytest

from runner.engine import batch as batch_module
from runner.engine.batch import Batch


def runs_of(seqs) -> list:
    return Batch(np.zeros(len(seqs)), np.arange(len(seqs)), seqs).runs


@pytest.mark.parametrize("few", [0, 10_000])          # numpy's way, Python's way
def test_runs_are_each_sequences_consecutive_rows_in_order(monkeypatch, few):
    monkeypatch.setattr(batch_module, "FEW_ROWS", few)
    assert runs_of([3]) == [(3, 0, 1)]
    assert runs_of([2] * 5) == [(2, 0, 5)]
    assert runs_of([0, 1, 2, 3]) == [(0, 0, 1), (1, 1, 2), (2, 2, 3), (3, 3, 4)]
    assert runs_of([1, 1, 0, 0, 0, 1]) == [(1, 0, 2), (0, 2, 5), (1, 5, 6)]
    seqs = np.random.default_rng(0).integers(0, 3, 200)
    found = runs_of(seqs)
    assert [row for seq, start, stop in found for row in [seq] * (stop - start)] == \
        seqs.tolist()
    assert all(seqs[stop] != seq for seq, _, stop in found[:-1])
