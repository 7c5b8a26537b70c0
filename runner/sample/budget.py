"""A thinking budget: at most so many tokens of thinking, then the close tag is forced and the
answer begins (llama.cpp's --reasoning-budget; Anthropic's thinking.budget_tokens, OpenAI's
reasoning effort as the server maps it).

Asked for only: a bound the model is not told of. The budget follows the reply token by
token, as a grammar follows it: it counts the tokens written inside the family's think tags
and, once the count reaches the budget, hands the batch loop the close tag's tokens one per
step in place of sampled ones, after which the model goes on with its answer. It waits for
a character cut between tokens to end first, so the thinking never ends inside a character.
A block the model closes itself ends the count; a block it opens again (some models think
more than once in a reply) gets the budget afresh, as llama.cpp's does.

Tags are found in the reply's bytes, not as token ids: a model may write a tag in pieces
(several tokens) where its vocabulary lacks it as one token, and AfterThinking
(sample/grammar.py) finds them the same way."""

from __future__ import annotations

import enum

from ..tokenizer import Tokenizer


class Phase(enum.Enum):
    WAITING = "waiting"       # for the open tag (the prompt did not open thinking)
    COUNTING = "counting"     # inside the thinking, tokens left
    FORCING = "forcing"       # the close tag's tokens, one a step
    DONE = "done"             # the answer; an open tag starts another count


def cut_character(data: bytes) -> bool:
    """Whether data ends inside a UTF-8 character (its last lead byte lacks followers)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:                            # a lead byte (or ASCII)
            wanted = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else \
                3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
            return wanted > back
    return False


class ThinkingBudget:
    """One sequence's thinking budget. The batch loop asks forced() before choosing a token
    (an id: take it instead of sampling) and tells accept() the token it took."""

    def __init__(self, budget: int, tags: tuple[str, str], tokenizer: Tokenizer,
                 opened: bool = False):
        """budget: thinking tokens allowed (0: close at once); tags: the family's (open,
        close); opened: the prompt ends inside the thinking (its open tag written)."""
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ValueError(f"A thinking budget is a number of tokens >= 0, not {budget!r}.")
        self.budget, self.tokenizer = budget, tokenizer
        self.open, self.close = (tag.encode() for tag in tags)
        self.forced_ids = tokenizer.encode(tags[1], add_special=False, parse_special=True)
        if not self.forced_ids:
            raise ValueError(f"The close tag {tags[1]!r} has no tokens to force.")
        self.phase, self.left, self.at, self.tail = Phase.WAITING, budget, 0, b""
        self.thought = 0                     # tokens of thinking counted, all blocks
        self.cut = False                     # the thinking ends inside a character
        if opened:
            self._start()

    def _start(self) -> None:
        """A think block began: count from the budget (none: force at once)."""
        self.left, self.tail, self.cut = self.budget, b"", False
        self.phase = Phase.COUNTING
        if self.budget == 0:
            self.phase, self.at = Phase.FORCING, 0

    def forced(self) -> int | None:
        """The token the next step must take, or None to sample as usual."""
        return self.forced_ids[self.at] if self.phase is Phase.FORCING else None

    def accept(self, token: int) -> None:
        """Follow the token the sequence took (sampled, or the forced one)."""
        if self.phase is Phase.FORCING:
            self.at += 1
            if self.at == len(self.forced_ids):
                self.phase, self.tail = Phase.DONE, b""
            return
        piece = self.tokenizer.piece(token)
        self.tail += piece
        if self.phase is not Phase.COUNTING:           # waiting for a block to open
            if self.open in self.tail:
                self._start()
            else:
                self.tail = self.tail[-len(self.open):]
            return
        if self.close in self.tail:                    # the model closed it itself
            self.phase, self.tail = Phase.DONE, b""
            return
        self.tail = self.tail[-max(len(self.close), 4):]
        self.thought += 1
        self.left -= 1
        self.cut = cut_character(self.tail)
        if self.left <= 0 and not self.cut:            # spent: the close tag comes next
            self.phase, self.at = Phase.FORCING, 0

    def quiet(self, ahead: int) -> bool:
        """Whether none of the next `ahead` tokens can be forced, whatever is sampled
        before them: then they may be chosen where the logits lie, and a device may feed
        each to the next step itself (engine/loop.py's chained steps) without the host."""
        if self.phase is Phase.FORCING:
            return False
        if self.phase is Phase.COUNTING:               # forced once `left` more are taken
            return self.left >= ahead
        return self.budget >= ahead - 1                # the open tag comes first
