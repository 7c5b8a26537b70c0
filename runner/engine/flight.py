"""A batch in flight: which sequences' tokens it holds, which rows each samples from, and
where the tokens of the sequences that wait on the flight before it come from."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from ..multimodal.media import run_start, token_ids
from .batch import Batch
from .executor import Step
from .request import Active

PLACEHOLDER = -1         # a token the flight before samples


@dataclass
class Entry:
    active: Active
    start: int                 # position of the first token
    tokens: list               # ids, MediaRows; PLACEHOLDER: what the previous batch samples
    rows: int                  # outputs: of the last token (1), none (0), all (embeddings)
    sampled: bool = False      # its token is the one sampled from the previous batch


@dataclass
class Flight:
    entries: list[Entry]
    batch: Batch
    step: Step | None = None
    output_rows: list[int] = field(default_factory=list)   # entry index of each output row
    needs: str = "logits"      # the least its samplers need: "choices", "candidates", "logits"
    rows: np.ndarray | None = None   # embeddings: the final hidden states it computed
    sources: list[int] | None = None   # chained: each token's row of the last flight's choices

    @classmethod
    def of(cls, entries: list[Entry]) -> "Flight":
        """The batch of entries (placeholders as token 0 until launch), not yet built."""
        # gathered in Python lists: for a decode step's few rows, cheaper than numpy calls
        items = [t for e in entries for t in e.tokens]
        positions = [p for e in entries for p in range(e.start, e.start + len(e.tokens))]
        seqs = [e.active.slot.id for e in entries for _ in e.tokens]
        ends = list(itertools.accumulate(len(e.tokens) for e in entries))
        outputs = [end - r for e, end in zip(entries, ends) for r in range(e.rows, 0, -1)]
        batch = Batch(token_ids(items), positions, seqs,
                      outputs=outputs or [ends[-1] - 1])
        return cls(entries, batch,
                   output_rows=[i for i, e in enumerate(entries) for _ in range(e.rows)],
                   needs=least_needed([e.active for e in entries if e.rows]))

    @property
    def items(self) -> list:
        return [t for e in self.entries for t in e.tokens]

    def sampled_rows(self) -> dict[int, tuple[Entry, int]]:
        """id(active) -> (its placeholder entry, that token's row of the batch)."""
        starts = itertools.accumulate([0] + [len(e.tokens) for e in self.entries])
        return {id(e.active): (e, row) for e, row in zip(self.entries, starts) if e.sampled}

    def chain_from(self, last: "Flight") -> list[int] | None:
        """Where last picks its tokens on the device and writes them to the chain, and every
        sequence it picks for has its placeholder here: each token's row of last's choices
        (-1: a token of its own). Else None (the placeholders are filled at launch)."""
        assert last.step is not None                       # built, and launched
        if last.needs != "choices" or not last.step.writes_chain:
            return None
        picked = {id(last.entries[i].active): row for row, i in enumerate(last.output_rows)
                  if not last.entries[i].active.done}
        sampled = [e for e in self.entries if e.sampled]
        if not picked or len(sampled) != len(picked) or \
                not all(id(e.active) in picked for e in sampled):
            return None
        return [picked[id(e.active)] if e.sampled else -1 for e in self.entries
                for _ in e.tokens]


def pack(order: list[Active], awaiting: set[int], budget: int, context: int, whole: bool,
         all_rows: bool) -> list[Entry]:
    """The entries of the next batch, up to budget tokens, from the sequences in order: a
    chunk of each one's pending prompt, or a placeholder for each one awaiting a token
    from the flight in progress (ids in awaiting) while its context has room and another
    token is wanted after it (Active.continues); placed in their slots' tokens. whole: a
    prompt goes in one batch or waits (an encoder's); all_rows: every token's row is an
    output (embeddings). Sorted by slot: a batch of decode steps may then attend each
    sequence's cells alone (CausalCache._streams)."""
    entries = []
    for active in order:
        if budget == 0:
            break
        start = len(active.slot.tokens)
        if active.pending and whole and len(active.pending) > budget:
            continue                               # whole, in the next batch
        if active.pending:
            # a batch is cut before an image rather than inside it, and at a checkpoint
            room = min(budget, len(active.pending), active.until_cut(start))
            chunk = active.pending[:run_start(active.pending, room)]
            if not chunk:
                continue                           # the image waits for the next batch
            del active.pending[:len(chunk)]
            rows = len(chunk) if all_rows else int(not active.pending)
            entries.append(Entry(active, start, chunk, rows))
        elif id(active) in awaiting and start < context and active.continues:
            entries.append(Entry(active, start, [PLACEHOLDER], rows=1, sampled=True))
        else:
            continue
        active.slot.tokens.extend(entries[-1].tokens)
        active.placed += 1
        budget -= len(entries[-1].tokens)
    return sorted(entries, key=lambda e: e.active.slot.id)


def least_needed(sampling: list[Active]) -> str:
    """The least of a flight's outputs its sequences' samplers need: each row's largest
    logit when every one is greedy, the few largest when every one samples from a top-k,
    else the logits."""
    if all(a.greedy for a in sampling):
        return "choices"
    if all(a.takes_candidates for a in sampling):
        return "candidates"
    return "logits"
