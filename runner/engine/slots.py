"""The input cache: cache slots, one KV-cache sequence each, and which one a prompt gets.

A slot remembers the tokens its sequence holds in the KV cache, so a new prompt that starts
the same way only evaluates what differs (the longest common prefix is reused).

Single-user policy: the free slot with the longest common prefix (the least recently used
one when none matches). A prefix resumes only where the cache still holds what its next
token sees (kv.holds): a sliding-window layer's pool keeps its window and some batches of
each sequence's recent past, so a prefix that ends further back than that is evaluated
again from the start, as llama.cpp and Ollama do.

Multi-user policy: the least recently used free slot, into which the best prefix of any
slot (busy ones too) is forked first: the KV cells are shared, not copied, so many users of
one system prompt cost its cells once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..kvcache import CausalCache
from ..multimodal.media import run_start


@dataclass
class Slot:
    id: int                                            # its sequence id in the KV cache
    tokens: list = field(default_factory=list)    # what the cache holds: ids, media rows
    last_used: float = 0.0
    busy: bool = False
    # (n, the rope position of tokens[n]) where a model's rope reads positions in more than
    # one dimension (multimodal/axes.py): where the walk to a batch's first token resumes
    axes_known: tuple[int, int] = (0, 0)

    def forget_from(self, n: int) -> None:
        """What it holds changes from position n on."""
        if self.axes_known[0] > n:
            self.axes_known = (0, 0)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class InputCache:
    def __init__(self, kv: CausalCache, parallel: int, multiuser: bool = False):
        if not 1 <= parallel <= 63:
            raise ValueError(f"parallel must lie in [1, 63], not {parallel}.")
        if kv.size < parallel:
            raise ValueError(f"A KV cache of {kv.size} cells cannot hold {parallel} sequences.")
        self.kv, self.multiuser = kv, multiuser
        self.slots = [Slot(i) for i in range(parallel)]
        kv.partition(parallel)
        self.context = kv.size // parallel          # the most one sequence may hold

    def free(self) -> list[Slot]:
        return [slot for slot in self.slots if not slot.busy]

    def acquire(self, prompt: list[int], reuse: bool = True) -> tuple[Slot, int] | None:
        """A free slot for prompt and how many of its first tokens the cache already holds
        (at most len(prompt) - 1: the last one is evaluated for its logits). None: all busy.
        reuse=False: the least recently used slot, emptied."""
        free = self.free()
        if not free:
            return None
        if not reuse:
            slot = min(free, key=lambda s: s.last_used)
            prompt = []
        elif self.multiuser:
            slot = min(free, key=lambda s: s.last_used)
            best = max(self.slots, key=lambda s: common_prefix(s.tokens, prompt))
            shared = self._resume_point(best.id, prompt, min(common_prefix(best.tokens, prompt),
                                                             len(prompt) - 1))
            if best is not slot and shared > common_prefix(slot.tokens, prompt):
                self.kv.copy_prefix(best.id, slot.id, shared)
                slot.tokens = best.tokens[:shared]
                slot.forget_from(0)
        else:
            slot = max(free, key=lambda s: (common_prefix(s.tokens, prompt), -s.last_used))
        keep = self._resume_point(slot.id, prompt,
                                  max(0, min(common_prefix(slot.tokens, prompt), len(prompt) - 1)))
        self.truncate(slot, keep)
        slot.busy, slot.last_used = True, time.monotonic()
        return slot, keep

    def _resume_point(self, seq: int, prompt: list, n: int) -> int:
        """The most of prompt's first n tokens, which seq's cache holds, that a prompt may
        resume after: an image is reused whole or evaluated again whole; a recurrent state
        resumes only where the cache kept one (kv.rollback_point); 0 where the cache no
        longer holds what the next token sees (kv.holds)."""
        n = run_start(prompt, n)
        while (earlier := run_start(prompt, self.kv.rollback_point(seq, n))) != n:
            n = earlier
        return n if self.kv.holds(seq, n) else 0

    def truncate(self, slot: Slot, n: int) -> int:
        """Forget what slot holds from position n on (from the latest position before it
        that its cache may resume at); how many tokens it keeps."""
        n = self.kv.rollback_point(slot.id, n)
        self.kv.remove(slot.id, n)
        del slot.tokens[n:]
        slot.forget_from(n)
        return n

    def release(self, slot: Slot) -> None:
        slot.busy, slot.last_used = False, time.monotonic()

    def shared_beyond(self, slot: Slot, position: int) -> bool:
        """Whether another sequence shares slot's cells from position on (a fork)."""
        cells = self.kv.cells(slot.id, position)
        return bool((self.kv.seq[cells] != (1 << slot.id)).any())
