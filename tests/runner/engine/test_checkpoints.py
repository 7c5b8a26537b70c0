"""Where a recurrent model's prompt is cut for checkpoints: its last special tokens near the
end, every EVERY positions, its end where the cache keeps room for it, never inside an
image, never at or before where the prompt resumes."""

from __future__ import annotations

from runner.engine.checkpoints import EVERY, MARKS, cut_points
from runner.multimodal.media import MediaRow

SPECIAL = {1, 2}


def special(token: int) -> bool:
    return token in SPECIAL


def test_the_last_special_tokens_and_the_end():
    prompt = [5] * 30 + [1, 5, 5, 2, 5, 1, 5, 5, 2, 5]        # specials at 30, 33, 35, 38
    assert cut_points(prompt, 0, special) == [35, 38, 40]
    assert cut_points(prompt, 0, special, room=MARKS + 1) == [35, 38]     # no room for the end
    assert cut_points(prompt, 36, special) == [38, 40]                   # resumed after 35


def test_every_so_many_positions_of_a_long_prompt():
    prompt = [5] * (2 * EVERY + 10)
    assert cut_points(prompt, 0, special) == [EVERY, 2 * EVERY, 2 * EVERY + 10]
    assert cut_points(prompt, EVERY, special) == [2 * EVERY, 2 * EVERY + 10]


def test_an_image_is_not_cut_but_its_start_is():
    rows = [MediaRow(b"image", i, None) for i in range(4)]
    prompt = [5] * (EVERY - 2) + rows + [5] * 3            # rows at EVERY - 2 to EVERY + 1
    assert cut_points(prompt, 0, special) == [EVERY - 2, EVERY + 5]
