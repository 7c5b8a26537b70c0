"""Which recurrent state each cell of a state pool holds: of which sequences, after how many
of their tokens, kept as a checkpoint or not.

A recurrent layer (gated DeltaNet, Mamba2, a short convolution) keeps, per sequence, the
state its tokens so far left behind, not one entry per token as attention does: a state
cannot drop a range of positions, only be replaced by an earlier copy. So every batch
reads each sequence's state from one cell and writes the new one into another (never in
place), and a cell once written does not change:
- the state before the newest batch stays at hand (one step back: a decode step placed
  while its sequence ended is undone, as a KV cache gives back the step's cell);
- a checkpoint is a cell kept beyond that, where the engine asked for one (where a prompt
  ends, its last turn begins, at the end of a reply, every so many tokens of a long prompt),
  at most `checkpoints` per sequence, the oldest given up first;
- a fork (a prompt shared with another sequence) shares the cell, not a copy.
Cell 0 holds zeros forever: every sequence's state before its first token.

A sequence may resume at any position a cell of its holds (rollback_point()), and only
there: the input cache resumes a new prompt from the latest one within the common prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

ZERO = 0             # the cell of zeros: the state before a sequence's first token
LIVE = 2             # cells a sequence keeps besides its checkpoints: the newest, one before


class StatesFullError(RuntimeError):
    pass


@dataclass
class Held:
    position: int        # tokens of the sequence the state has taken in
    cell: int
    checkpoint: bool = False


class StateCells:
    def __init__(self, sequences: int, checkpoints: int):
        if checkpoints < 0:
            raise ValueError(f"A sequence keeps zero or more checkpoints, not {checkpoints}.")
        self.sequences, self.checkpoints = sequences, checkpoints
        self.size = self.cells_for(sequences, checkpoints)
        self.refs = [0] * self.size
        self.refs[ZERO] = 1                              # never free
        self.held: dict[int, list[Held]] = {}            # sequence -> its cells, oldest first

    @staticmethod
    def cells_for(sequences: int, checkpoints: int) -> int:
        """The zero cell, each sequence's, and one a batch takes before it lets one go."""
        return 2 + sequences * (LIVE + checkpoints)

    # -- what a sequence holds ------------------------------------------------------------

    def newest(self, seq: int) -> Held | None:
        held = self.held.get(seq)
        return held[-1] if held else None

    def positions(self, seq: int) -> list[int]:
        """The positions seq may resume at, oldest first (0 always)."""
        return [0] + [h.position for h in self.held.get(seq, ()) if h.position]

    def holds(self, seq: int, n: int) -> bool:
        return n in self.positions(seq)

    def rollback_point(self, seq: int, n: int) -> int:
        """The latest position at or before n that seq may resume at."""
        return max(p for p in self.positions(seq) if p <= n)

    def checkpoint_count(self, seq: int) -> int:
        return sum(h.checkpoint for h in self.held.get(seq, ()))

    # -- the batch's cells ----------------------------------------------------------------

    def place(self, runs) -> tuple[list[int], list[int]]:
        """For each run (seq, start, stop) of a batch: the cell its state is read from (that
        of position start) and a free one the new state (of position stop) is written to;
        the states seq keeps neither as the newest LIVE nor as checkpoints are let go (a
        graph still computing may read one: the batch that next writes it computes after)."""
        sources = [self._cell_at(seq, start) for seq, start, _ in runs]
        targets = []
        for seq, _, stop in runs:
            cell = self._free_cell()
            self.refs[cell] += 1
            targets.append(cell)
            self.held.setdefault(seq, []).append(Held(stop, cell))
            self._trim(seq)
        return sources, targets

    def _cell_at(self, seq: int, position: int) -> int:
        if position == 0:
            return ZERO
        newest = self.newest(seq)
        if newest is None or newest.position != position:
            have = "none" if newest is None else f"position {newest.position}"
            raise ValueError(f"Sequence {seq} continues at position {position}, but its "
                             f"recurrent state is at {have}: a recurrence resumes only "
                             "where its state was left.")
        return newest.cell

    def _free_cell(self) -> int:
        for cell, refs in enumerate(self.refs):
            if refs == 0:
                return cell
        raise StatesFullError(f"All {self.size} recurrent state cells are taken.")

    def _trim(self, seq: int) -> None:
        """Let go of seq's states that are neither its newest LIVE nor checkpoints, and of
        its oldest checkpoints beyond the bound."""
        held = self.held[seq]
        extra = self.checkpoint_count(seq) - self.checkpoints
        for h in held:
            if extra > 0 and h.checkpoint:
                h.checkpoint, extra = False, extra - 1
        recent = {id(h) for h in held[-LIVE:]}
        kept = [h for h in held if h.checkpoint or id(h) in recent]
        for h in held:
            if h not in kept:
                self.refs[h.cell] -= 1
        self.held[seq] = kept

    # -- the runner's edits ---------------------------------------------------------------

    def mark(self, seq: int, position: int) -> bool:
        """Keep seq's state at position as a checkpoint (the oldest beyond the bound is let
        go). False where seq holds no state there."""
        for h in self.held.get(seq, ()):
            if h.position == position:
                h.checkpoint = True
                self._trim(seq)
                return True
        return False

    def truncate(self, seq: int, n: int) -> None:
        """Forget seq's states after position n; n must be one it holds (rollback_point)."""
        if not self.holds(seq, n):
            raise ValueError(f"Sequence {seq} holds no recurrent state at position {n}; it "
                             f"may resume at {self.positions(seq)}.")
        held = self.held.get(seq, [])
        for h in held:
            if h.position > n:
                self.refs[h.cell] -= 1
        self.held[seq] = [h for h in held if h.position <= n]

    def fork(self, src: int, dst: int, n: int) -> None:
        """dst holds src's state at position n (shared, not copied), and nothing else."""
        self.truncate(dst, 0)
        if n == 0:
            return
        found = next((h for h in self.held.get(src, ()) if h.position == n), None)
        if found is None:
            raise ValueError(f"Sequence {src} holds no recurrent state at position {n} to "
                             "share.")
        self.refs[found.cell] += 1
        self.held[dst] = [Held(n, found.cell)]
