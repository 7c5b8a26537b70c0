"""The context shift: a sequence whose context is full keeps its first num_keep tokens, drops
half of the rest and goes on (Ollama's and llama.cpp's shift); the batch loop calls it while
nothing computes."""

from __future__ import annotations

from ..multimodal.axes import position_at
from ..multimodal.media import run_end, run_start
from .executor import Executor
from .request import Active
from .slots import InputCache


def shift_context(active: Active, cache: InputCache, executor: Executor, axes: int) -> bool:
    """Keep num_keep tokens, drop half of the rest, re-rotate the keys after the gap (axes
    > 1: M-RoPE positions). Cells shared with a fork cannot move, nor can a recurrent
    state forget a range: then the kept tokens are evaluated again (from the latest point
    the cache may resume at before the gap). False where nothing can be dropped."""
    slot, n = active.slot, len(active.slot.tokens)
    num_keep = active.request.options.num_keep
    keep = min(len(active.request.tokens) if num_keep < 0 else num_keep, n - 1)
    keep = run_start(slot.tokens, keep)                       # images are kept or dropped
    discard = run_end(slot.tokens, keep + (n - keep) // 2) - keep          # whole
    if discard <= 0:
        return False
    if not executor.kv.drops_ranges or cache.shared_beyond(slot, keep + discard):
        kept = slot.tokens[:keep] + slot.tokens[keep + discard:]
        resumed = cache.truncate(slot, keep)
        active.pending = kept[resumed:] + active.pending
        return True
    rope_delta = None
    if axes > 1:                          # images may have saved rope positions there
        rope_delta = position_at(slot.tokens, keep) - position_at(slot.tokens, keep + discard)
    executor.kv.remove(slot.id, keep, keep + discard)
    executor.shift(slot.id, keep + discard, n, -discard, rope_delta)
    del slot.tokens[keep:keep + discard]
    slot.forget_from(keep)
    return True
