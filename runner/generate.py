"""Generating text for one sequence: prefill, sample, stream, stop, shift.

The multi-sequence batch loop (issue 4) will drive the same pieces; this module keeps one
sequence in a cache slot and reuses the longest common prefix with the previous prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .batch import Batch
from .executor import Executor
from .sample import Sampler, SamplingOptions
from .tokenizer import TextStream, Tokenizer

SEQ = 0


@dataclass
class GenerateOptions:
    num_predict: int = -1          # -1: until a stop, or for ever with context shift
    stop: list[str] = field(default_factory=list)
    num_keep: int = 4              # tokens kept at the start when the context shifts
    shift: bool = True             # shift a full context (else stop with reason "length")

    def __post_init__(self):
        if isinstance(self.num_predict, bool) or not isinstance(self.num_predict, int) \
                or self.num_predict < -1:
            raise ValueError(f"num_predict must be an integer >= -1, not {self.num_predict!r}.")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be a list of non-empty strings, not {self.stop!r}.")
        if isinstance(self.num_keep, bool) or not isinstance(self.num_keep, int) \
                or self.num_keep < 0:
            raise ValueError(f"num_keep must be a non-negative integer, not {self.num_keep!r}.")


@dataclass
class Result:
    """What a finished generation reports (the text itself was streamed)."""
    done_reason: str = "stop"      # "stop" | "length"
    prompt_tokens: int = 0         # tokens actually evaluated (a reused prefix is not)
    generated: list[int] = field(default_factory=list)


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


class Sequence:
    """One conversation's tokens in the KV cache."""

    def __init__(self, executor: Executor, tokenizer: Tokenizer, batch_size: int):
        self.executor, self.tokenizer, self.batch_size = executor, tokenizer, batch_size
        self.tokens: list[int] = []          # what the cache holds, in position order

    @property
    def context(self) -> int:
        return self.executor.kv.size

    def prefill(self, prompt: list[int]) -> tuple[np.ndarray, int]:
        """Evaluate what the cache lacks of prompt; returns (last logits, tokens evaluated)."""
        if not prompt:
            raise ValueError("The prompt is empty: there is nothing to continue from.")
        if len(prompt) >= self.context:
            raise ValueError(f"The prompt has {len(prompt)} tokens but the context holds "
                             f"{self.context}; shorten it or raise the context size.")
        keep = 0
        while keep < min(len(prompt) - 1, len(self.tokens)) and prompt[keep] == self.tokens[keep]:
            keep += 1
        self.executor.kv.remove(SEQ, keep)
        self.tokens = prompt[:keep]
        logits = None
        for start in range(keep, len(prompt), self.batch_size):
            chunk = prompt[start:start + self.batch_size]
            logits = self._run(chunk)
        return logits, len(prompt) - keep

    def _run(self, chunk: list[int]) -> np.ndarray:
        batch = Batch.of_sequence(chunk, len(self.tokens), SEQ)
        logits = self.executor.logits(batch)[-1]
        self.tokens.extend(chunk)
        return logits

    def step(self, token: int, ahead=None, build_next: bool = False):
        """Decode token; returns (its logits, the next step built while this one computed,
        or None). ahead is the step built for this position during the previous one."""
        executor = self.executor
        step = ahead or executor.build(Batch.of_sequence([token], len(self.tokens), SEQ))
        executor.launch(step, [token])
        self.tokens.append(token)
        next_step = None
        try:
            if build_next and len(self.tokens) + 1 < self.context:
                next_step = executor.build(Batch.of_sequence([0], len(self.tokens), SEQ))
        finally:
            logits = executor.finish(step)[-1]
        return logits, next_step

    def cancel(self, ahead) -> None:
        if ahead is not None:
            self.executor.cancel(ahead)

    def shift(self, num_keep: int) -> None:
        """Drop half of what follows the first num_keep tokens; later keys re-rotate."""
        n = len(self.tokens)
        keep = min(num_keep, n - 1)
        discard = (n - keep) // 2
        if discard <= 0:
            raise ValueError("The context is full and nothing can be shifted out.")
        self.executor.kv.remove(SEQ, keep, keep + discard)
        self.executor.shift(SEQ, keep + discard, n, -discard)
        del self.tokens[keep:keep + discard]


def generate(sequence: Sequence, prompt: list[int], sampling: SamplingOptions,
             options: GenerateOptions, result: Result):
    """Yield text pieces; fill result with the reason and counts when done."""
    tokenizer = sequence.tokenizer
    sampler = Sampler(sampling)
    logits, result.prompt_tokens = sequence.prefill(prompt)
    stream, stops = TextStream(), StopScanner(options.stop)
    history = list(prompt)
    ahead = None              # the next step's graph, built while the current one computed
    try:
        while True:
            if 0 <= options.num_predict <= len(result.generated):
                result.done_reason = "length"
                break
            token = sampler.sample(logits, history)
            if tokenizer.is_eog(token):
                result.done_reason = "stop"
                break
            result.generated.append(token)
            history.append(token)
            text, hit = stops.push(stream.push(tokenizer.piece(token)))
            if text:
                yield text
            if hit:
                result.done_reason = "stop"
                return
            if len(sequence.tokens) + 1 >= sequence.context:
                if not options.shift:
                    result.done_reason = "length"
                    break
                sequence.cancel(ahead)
                ahead = None
                sequence.shift(options.num_keep)
            more = options.num_predict < 0 or len(result.generated) < options.num_predict
            logits, ahead = sequence.step(token, ahead, build_next=more)
        tail, _ = stops.push(stream.flush())
        tail += stops.flush()
        if tail:
            yield tail
    finally:
        sequence.cancel(ahead)
