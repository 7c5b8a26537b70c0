"""What the hybrid cache decides without a model: the rows a state moves in, and the
default checkpoints. (Through models: tests/runner/convert/test_qwen35.py.)"""

from __future__ import annotations

import pytest

from runner.kvcache import LayerShape, StateShape
from runner.kvcache.hybrid import ROW_FLOATS, default_checkpoints, pieces


@pytest.mark.parametrize("floats, rows", [
    (16 * 128 * 128, 64),        # Qwen 3.5's DeltaNet state: rows of 4096 floats
    (6144 * 3, 9),               # its convolution's: 2048 floats (the largest power of two)
    (4096, 1), (512, 1),         # one row already
    (3 * 5 * 7 * 64, 1),         # no power-of-two divisor of 256 floats: one row
])
def test_a_state_moves_in_rows_every_thread_can_share(floats, rows):
    assert pieces(floats) == rows
    assert floats % rows == 0 and floats // rows <= max(ROW_FLOATS, floats if rows == 1 else 0)


def test_checkpoints_default_to_what_the_kv_cache_would_hold_within_bounds():
    attention = LayerShape(2, 64, 64)
    recurrent = LayerShape(0, 0, 0, state=StateShape(256, 3, 4 * 64 * 64))
    layers = [recurrent, recurrent, recurrent, attention]
    assert default_checkpoints(layers, 8192, 1) == 4       # the KV cache's bytes allow more
    assert default_checkpoints(layers, 16, 1) == 2         # never fewer than two
    assert default_checkpoints([attention], 8192, 1) == 0  # nothing recurrent
