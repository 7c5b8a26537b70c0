"""The input stream with images: runs of media rows are never cut (truncation, shifts)."""

from __future__ import annotations

import numpy as np
import pytest

import runner
from runner.engine.request import truncate_prompt
from runner.engine.slots import common_prefix
from runner.models.vision import Pixels
from runner.multimodal.media import (
    Media,
    MediaRow,
    largest_run,
    run_end,
    run_start,
    runs,
    token_ids,
)

from tests.support.hf_vision import png


def media(digest: bytes, rows: int) -> Media:
    pixels = Pixels(np.zeros((rows, 3), np.float32), (1, rows), rows)
    return Media(digest, pixels, lambda d, p: np.zeros((rows, 4), np.float32), lambda d: True)


A, B = media(b"a", 3), media(b"b", 2)
ITEMS = [1, 2, *A.items(), 3, *B.items(), *A.items(), 4]    # 0-1 text, 2-4 A, 5, 6-7 B, 8-10 A


def test_runs_and_their_edges():
    assert [(s, e, m.digest) for s, e, m in runs(ITEMS)] == \
        [(2, 5, b"a"), (6, 8, b"b"), (8, 11, b"a")]
    assert largest_run(ITEMS) == 3 and largest_run([1, 2]) == 0
    assert run_start(ITEMS, 3) == 2 and run_start(ITEMS, 2) == 2 and run_start(ITEMS, 8) == 8
    assert run_end(ITEMS, 9) == 11 and run_end(ITEMS, 5) == 5 and run_end(ITEMS, 7) == 8
    assert token_ids(ITEMS).tolist() == [1, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 4]


def test_rows_match_by_image_content_not_by_object():
    again = media(b"a", 3)
    assert common_prefix(ITEMS, [1, 2, *again.items(), 3]) == 6
    assert common_prefix(ITEMS, [1, 2, *media(b"c", 3).items()]) == 2
    assert MediaRow(b"a", 0, A) != 0 and 0 != MediaRow(b"a", 0, A)


@pytest.mark.parametrize("limit,keep", [(7, 3), (9, 0), (6, 1)])
def test_truncation_keeps_or_drops_an_image_whole(limit, keep):
    kept = truncate_prompt(ITEMS, limit, keep)
    assert len(kept) <= limit
    for start, end, found in runs(kept):
        assert end - start == found.rows


def test_a_context_shift_never_cuts_an_image(vision_models):
    paths = vision_models("gemma3")
    model = runner.load(paths["model"], projector=paths["mmproj"], num_ctx=24, threads=2,
                        kv_cache_type="f32")
    try:
        text = model.generate("ab [img-0] c", images=[png(3, 8, 8)], stream=False,
                              temperature=0, num_predict=60, num_keep=3)
        assert model.last.eval_count == 60 and model.last.done_reason == "length"
        slot = model.engine.cache.slots[0]
        for start, end, found in runs(slot.tokens):
            assert end - start == found.rows
        assert isinstance(text, str)
    finally:
        model.close()
