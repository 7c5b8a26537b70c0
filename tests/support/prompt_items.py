"""A loaded model fed prompt items directly: every position's logits, one request's events."""

from __future__ import annotations

import itertools
import queue
import time

import numpy as np

from runner.api import split_options
from runner.engine.batch import Batch
from runner.engine.request import Request
from runner.multimodal.axes import axes
from runner.multimodal.media import attach_media, token_ids


def every_logit(model, items) -> np.ndarray:
    """Our logits at every position of items, in one batch of sequence 0 (the engine idle)."""
    n = len(items)
    batch = Batch(token_ids(items), np.arange(n), np.zeros(n), outputs=np.arange(n))
    attach_media(batch, items, itertools.count())
    if model.executor.model.position_axes() > 1:           # M-RoPE: images in 2-D
        batch.axes = axes(items, 0, n, 0)[0]
    try:
        return model.executor.logits(batch)
    finally:
        model.kv.remove(0)
        model.executor.forget()


def run(model, items, **options):
    """The events of one request of items (greedy, logprobs of the top 3)."""
    events = queue.Queue()
    sampling, generation = split_options(dict(dict(temperature=0, num_predict=3), **options))
    model.engine.submit(Request(items, events.put, sampling, generation, logprobs=True,
                                top_logprobs=3))
    collected = []
    while True:
        event = events.get(timeout=60)
        collected.append(event)
        assert "error" not in event, event
        if event.get("done"):
            break
    deadline = time.monotonic() + 10          # the slot is free once no batch writes it
    while any(s.busy for s in model.engine.cache.slots) and time.monotonic() < deadline:
        time.sleep(0.005)
    return collected
