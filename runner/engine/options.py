"""What a generation request asks for beyond sampling, and the stop-string scanner.
The batch loop (engine/) generates."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GenerateOptions:
    num_predict: int = -1          # -1: until a stop, or for ever with context shift;
    #                                -2: until a stop or the context is full
    stop: list[str] = field(default_factory=list)
    num_keep: int = 4              # tokens kept at the start when the context shifts
    #                                (-1: the whole prompt)
    shift: bool = True             # shift a full context (else stop with reason "length")

    def __post_init__(self):
        if isinstance(self.num_predict, bool) or not isinstance(self.num_predict, int) \
                or self.num_predict < -2:
            raise ValueError(f"num_predict must be an integer >= -2, not {self.num_predict!r}.")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be a list of non-empty strings, not {self.stop!r}.")
        if isinstance(self.num_keep, bool) or not isinstance(self.num_keep, int) \
                or self.num_keep < -1:
            raise ValueError(f"num_keep must be an integer >= -1, not {self.num_keep!r}.")


class StopScanner:
    """Holds back text that could be the start of a stop string; finds complete ones."""

    def __init__(self, stops: list[str]):
        self.stops = stops
        self.pending = ""

    def push(self, text: str) -> tuple[str, bool]:
        """(text safe to emit, whether a stop string was hit: then the text ends before it)."""
        self.pending += text
        hits = [(self.pending.find(s), s) for s in self.stops if s in self.pending]
        if hits:
            cut = min(h[0] for h in hits)
            out, self.pending = self.pending[:cut], ""
            return out, True
        hold = max((self._overlap(s) for s in self.stops), default=0)
        cut = len(self.pending) - hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out, False

    def _overlap(self, stop: str) -> int:
        for n in range(min(len(stop) - 1, len(self.pending)), 0, -1):
            if self.pending.endswith(stop[:n]):
                return n
        return 0

    def flush(self) -> str:
        out, self.pending = self.pending, ""
        return out
