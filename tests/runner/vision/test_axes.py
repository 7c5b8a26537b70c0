"""M-RoPE positions (multimodal/axes.py) against transformers' get_rope_index, and through
the cache: a context shift that drops an image turns the kept keys by the rope positions the
image took, not by its cells (the first layer's keys then equal a cold evaluation's of what
is kept; turned by the cells they would not); a fork of a prefix with an image resumes its
walk and gives a cold evaluation's logits."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import runner
from runner.engine.batch import Batch
from runner.multimodal.axes import axes, position_at
from runner.multimodal.media import MediaRow, attach_media, runs, token_ids

from tests.support.hf_vision import png
from tests.support.prompt_items import run

IMAGES = [png(21, 40, 56), png(22, 20, 12)]


@pytest.fixture(scope="module")
def model(vision_models):
    paths = vision_models("qwen2_5_vl")
    loaded = runner.load(paths["model"], projector=paths["mmproj"], num_ctx=256, threads=2,
                         kv_cache_type="f32", parallel=2, multiuser_cache=True)
    yield loaded
    loaded.close()


@pytest.mark.parametrize("prompt", ["A [img-0] b [img-1] c d", "[img-0][img-1] after",
                                    "x [img-1]"])
def test_axes_are_the_references_rope_index(model, reference, prompt):
    import torch

    from tests.support import hf_vision

    hf = reference("qwen2_5_vl")
    used = sorted({int(n) for n in re.findall(r"\[img-(\d+)\]", prompt)})
    items = model.prompt_items(prompt, {n: IMAGES[n] for n in used})
    ids = torch.tensor([[hf.config.image_token_id if isinstance(t, MediaRow) else t
                         for t in items]])
    grids = np.concatenate([hf_vision.processed("qwen2_5_vl", IMAGES[n])["image_grid_thw"]
                            for n in used])
    expected, _ = hf.model.get_rope_index(ids, (ids == hf.config.image_token_id).int(),
                                          torch.tensor(grids))
    ours, after = axes(items, 0, len(items), 0)
    assert np.array_equal(ours[:3], expected[:, 0].numpy())
    assert np.array_equal(ours[3], ours[0])               # unclaimed pairs turn by time
    assert after == int(expected.max()) + 1
    outside = [n for n in range(len(items) + 1)            # where a walk may stop
               if n == len(items) or not isinstance(items[n], MediaRow) or items[n].index == 0]
    for n in outside:                                      # resumed walks agree
        known = max(m for m in outside if m <= n // 2)
        assert position_at(items, n, (known, position_at(items, known))) == \
            position_at(items, n) == (int(expected[0, 0, n]) if n < len(items) else after)


def evaluate(model, items, start: int, first: int, keep: bool = False) -> np.ndarray:
    """Logits of items' last row, evaluated at cache positions from start (rope positions
    from first) in sequence 0; the cache keeps them where keep."""
    n = len(items)
    batch = Batch(token_ids(items), np.arange(start, start + n), np.zeros(n))
    attach_media(batch, items, itertools.count())
    batch.axes = axes(items, 0, n, first)[0]
    try:
        return model.executor.logits(batch)[-1]
    finally:
        if not keep:
            model.kv.remove(0, start)
        model.executor.forget()


def first_layer_keys(model, count: int) -> np.ndarray:
    """The first layer's cached keys of sequence 0's positions 0..count-1 (they depend on
    each token and its rope position alone; later layers' keys also on what it attended
    to, which a shift leaves as it was)."""
    kv = model.kv
    cells = np.flatnonzero(kv.cells(0, 0))
    ordered = cells[np.argsort(kv.pos[cells])][:count]
    return kv.k[0].numpy(copy=True)[ordered]


@pytest.mark.parametrize("turned_by", ["rope positions", "cells"])
def test_a_shift_that_drops_an_image_turns_keys_by_its_rope_span(vision_models, turned_by):
    paths = vision_models("qwen2_5_vl")
    shifted, cold = (runner.load(paths["model"], projector=paths["mmproj"], num_ctx=256,
                                 threads=2, kv_cache_type="f32") for _ in range(2))
    try:
        items = shifted.prompt_items("Before [img-0] and then some words after it",
                                     IMAGES[:1])
        (first, end, _), = runs(items)
        keep, discard = first - 1, end + 2 - (first - 1)       # the image and a word or two
        evaluate(shifted, items, 0, 0, keep=True)
        rope_delta = position_at(items, keep) - position_at(items, keep + discard)
        assert -discard < rope_delta < 0             # the image's rows took fewer positions
        shifted.kv.remove(0, keep, keep + discard)
        shifted.executor.shift(0, keep + discard, len(items), -discard,
                               rope_delta if turned_by == "rope positions" else None)
        kept = items[:keep] + items[keep + discard:]
        evaluate(cold, kept, 0, 0, keep=True)
        gap = np.abs(first_layer_keys(shifted, len(kept)) -
                     first_layer_keys(cold, len(kept))).max()
        assert (gap <= 1e-5) == (turned_by == "rope positions"), gap
    finally:
        shifted.close()
        cold.close()


def test_a_fork_of_a_prefix_with_an_image_resumes_its_walk(model):
    prefix = model.prompt_items("System [img-0] says", IMAGES[:1])
    first = prefix + model.tokenize(" one")
    second = prefix + model.tokenize(" two, three")
    cold = evaluate(model, second, 0, 0).astype(np.float64)       # before the engine runs
    cold_top = np.sort(cold - cold.max() - np.log(np.exp(cold - cold.max()).sum()))[::-1][:3]
    run(model, first)
    events = run(model, second)                  # forked into the other slot
    assert events[-1]["prompt_cached_count"] >= len(prefix)
    warm = next(e for e in events if e.get("logprobs"))["logprobs"][0]["top_logprobs"]
    assert np.abs(np.array([t["logprob"] for t in warm]) - cold_top).max() <= 1e-4
