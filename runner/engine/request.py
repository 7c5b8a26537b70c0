"""A completion request and the state of its sequence while the batch loop runs it.

The engine calls the request's emit() from its own thread with one event per call:
    {"content": str, "logprobs": [...]}                  text (and the logprobs of its tokens)
    {"done": True, "done_reason": "stop"|"length"|"closed", counts (prompt_eval_count: the
     whole prompt; prompt_cached_count: what the cache held of it) and nanosecond durations}
    {"embedding": [float], "prompt_eval_count": int}     an embedding request's only event
    {"error": str, "status"?: int}     the sequence failed (status 400: the request's fault,
                                       a grammar past its limits); nothing follows
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..multimodal.media import largest_run, run_end, run_start
from ..sample import Sampler, SamplingOptions, logprobs
from ..sample.budget import ThinkingBudget
from ..sample.grammar import AfterThinking, Constraint, GrammarError
from ..tokenizer import TextStream, Tokenizer
from .executor import CANDIDATES
from .options import GenerateOptions, StopScanner
from .slots import Slot


@dataclass
class Request:
    tokens: list                   # token ids, and media.MediaRow items where images stand
    emit: Callable[[dict], None]
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    options: GenerateOptions = field(default_factory=GenerateOptions)
    logprobs: bool = False
    top_logprobs: int = 0
    arrived: int = field(default_factory=time.perf_counter_ns)   # before tokenization
    constraint: Constraint | AfterThinking | None = None   # a grammar the output obeys
    budget: ThinkingBudget | None = None   # thinking tokens allowed (sample/budget.py)
    cancelled: threading.Event = field(default_factory=threading.Event)
    abort_message: str | None = None

    def cancel(self, message: str | None = None) -> None:
        """The engine drops the sequence before its next step: quietly (the client went
        away) or with an error event carrying message."""
        self.abort_message = message
        self.cancelled.set()

    def check_fits(self, context: int, batch_size: int, causal: bool = True) -> None:
        """Raise ValueError where an engine whose sequences hold context tokens, in batches
        of batch_size (causal False: an encoder, which reads a prompt in one batch), cannot
        take this prompt."""
        n = len(self.tokens)
        if n == 0:
            raise ValueError("The prompt is empty: there is nothing to continue from.")
        if n > context:
            raise ValueError(f"The prompt has {n} tokens but a sequence holds at most "
                             f"{context}; shorten it or allow truncation.")
        if not causal and n > batch_size:
            raise ValueError(f"The prompt has {n} tokens but this encoder reads a prompt "
                             f"in one batch of at most {batch_size}.")
        image = largest_run(self.tokens)
        if image > batch_size:
            raise ValueError(f"An image of the prompt takes {image} positions, which go "
                             f"into one batch, but a batch holds {batch_size}; load the "
                             "model with a larger batch size.")


# how many tokens past the last one recorded may be chosen before the host sees them: the
# next flight's (chosen from the flight in progress) and the one after (a chained step's,
# picked on the device and fed on there, engine/loop.py)
AHEAD = 2


class Active:
    """A request in a slot: what it still has to evaluate, and its output so far."""

    def __init__(self, request: Request, slot: Slot, reused: int, tokenizer: Tokenizer):
        self.request, self.slot, self.tokenizer = request, slot, tokenizer
        self.pending: list[int] = request.tokens[reused:]    # to evaluate next
        # the whole prompt counts, as Ollama's runner counts it (numPromptInputs) and OpenAI
        # does; what the cache held already is said apart
        self.prompt_eval_count, self.prompt_cached_count = len(request.tokens), reused
        self.sampler = Sampler(request.sampling, tokenizer.vocab.suppressed)
        self.history = [t for t in request.tokens if isinstance(t, int)]    # for penalties
        self.stream, self.stops = TextStream(), StopScanner(request.options.stop)
        self.generated = 0
        self.text_ends: list[int] = []      # text length after each generated token
        self.emitted = 0                    # characters sent so far
        self.logprobs: list[dict] = []      # of tokens whose text has not been sent yet
        self.first_token: int | None = None
        self._chosen = 0                    # the token choose() picked, for record()
        self._sampled_from: np.ndarray | None = None   # and the logits it came from (logprobs)
        self.done = False
        self.placed = 0                     # batches holding its tokens, not yet finished
        self.hidden: list[np.ndarray] = []  # final hidden states, when making an embedding
        self.keep = 0                       # tokens its slot keeps once it has ended
        self.cuts: list[int] = []           # positions its prompt's batches end at
                                            # (checkpoints of a recurrent state)

    def until_cut(self, start: int) -> int:
        """How many tokens from position start its next batch may take before a cut."""
        for cut in self.cuts:
            if cut > start:
                return cut - start
        return len(self.pending)

    @property
    def prefilling(self) -> bool:
        return self.first_token is None

    @property
    def greedy(self) -> bool:
        """Its next token is the largest logit, and nothing else of the logits is needed:
        the device that holds them may pick it (Executor.finish's choices). Not while a
        thinking budget may force one of the tokens chosen before the host looks again: a
        device that feeds its choice on would take the sampled token, not the forced one."""
        budget = self.request.budget
        return self._sampler_alone and self.sampler.greedy and \
            (budget is None or budget.quiet(AHEAD))

    @property
    def takes_candidates(self) -> bool:
        """Its sampler needs only the largest CANDIDATES logits (a device may pick them)."""
        return self._sampler_alone and self.sampler.takes_candidates(CANDIDATES)

    @property
    def _allowed(self) -> float:
        """How many more tokens num_predict allows (inf: no limit)."""
        limit = self.request.options.num_predict
        return math.inf if limit < 0 else limit - self.generated

    @property
    def continues(self) -> bool:
        """Whether the token being chosen now is not the last num_predict allows: only then
        is it evaluated (a placeholder in the next batch), the last one only streamed."""
        return self._allowed > 1

    @property
    def _sampler_alone(self) -> bool:
        """Only the sampler reads the logits (no grammar masks them, no logprobs)."""
        return self.request.constraint is None and not self.request.logprobs

    def choose(self, logits: np.ndarray | None = None, chosen: int | None = None,
               candidates: tuple | None = None) -> str | None:
        """Pick the next token: sampled from logits, or from candidates (ids and logits of
        the largest, picked on the device), or chosen (the largest logit's id, when greedy);
        it is then pending evaluation; a spent thinking budget's close tag takes the place
        of any of them. Returns a done reason instead once num_predict tokens were
        generated or the token ends generation."""
        request = self.request
        if self.first_token is None:
            self.first_token = time.perf_counter_ns()
        if self._allowed <= 0:
            return "length"
        forced = request.budget.forced() if request.budget is not None else None
        if forced is not None:
            token = forced
        elif chosen is not None:
            token = chosen
        elif candidates is not None:
            token = self.sampler.sample_candidates(*candidates)
        else:
            assert logits is not None                      # neither chosen nor candidates
            if request.constraint is not None:
                try:
                    logits = request.constraint.apply(logits)
                except GrammarError as error:              # past its limits: this one ends
                    self.fail(str(error), 400)
                    return "stop"
            token = self.sampler.sample(logits, self.history)
        if self.tokenizer.is_eog(token):
            return "stop"
        self._chosen, self.pending = token, [token]
        self._sampled_from = logits if request.logprobs else None
        return None

    def record(self) -> str | None:
        """Count the token just chosen as generated and stream its text (its evaluation may
        be under way already: the logits it came from must not have been read over). Returns
        a done reason (a stop string, a complete grammar, num_predict reached) or None to
        go on."""
        token = self._chosen
        constraint = self.request.constraint
        try:
            complete = constraint is not None and not constraint.accept(token)
        except GrammarError as error:
            self.fail(str(error), 400)
            return "stop"
        if self.request.budget is not None:
            self.request.budget.accept(token)
        self.generated += 1
        self.history.append(token)
        if self.request.logprobs:
            self.logprobs.append(self._logprob(self._sampled_from, token))
        text, hit = self.stops.push(self.stream.push(self.tokenizer.piece(token)))
        self.text_ends.append(self.emitted + len(self.stops.pending) + len(text)
                              if not hit else -1)
        if text:
            self._send(text)
        if hit or complete:
            return "stop"
        return "length" if self._allowed <= 0 else None

    def _logprob(self, logits, token: int) -> dict:
        chosen, top = logprobs(logits, token, self.request.top_logprobs)
        piece = self.tokenizer.decode
        return {"token": piece([token]), "logprob": chosen.logprob,
                "top_logprobs": [{"token": piece([t.token]), "logprob": t.logprob}
                                 for t in top]}

    def _send(self, text: str) -> None:
        event: dict[str, str | list[dict]] = {"content": text}
        if self.logprobs:
            event["logprobs"], self.logprobs = self.logprobs, []
        self.emitted += len(text)
        self.request.emit(event)

    def stop_tokens_cached(self) -> int:
        """How many evaluated tokens hold part of the stop string that ended the sequence
        (they leave the cache): those whose text ends after what was sent. The token that
        completed the stop was never evaluated."""
        if not self.stop_hit():
            return 0
        n = 0
        for end in reversed(self.text_ends[:-1]):
            if end <= self.emitted:
                break
            n += 1
        return n

    def finish(self, reason: str) -> None:
        """Send what is held back (unless a stop string cut it) and the final event."""
        if self.done:
            return
        self.done = True
        if not self.stop_hit():
            tail, _ = self.stops.push(self.stream.flush())
            tail += self.stops.flush()
            if tail or self.logprobs:
                self._send(tail)
        now = time.perf_counter_ns()
        first = self.first_token or now
        self.request.emit({
            "done": True, "done_reason": reason,
            "prompt_eval_count": self.prompt_eval_count,
            "prompt_cached_count": self.prompt_cached_count,
            "prompt_eval_duration": first - self.request.arrived,
            "eval_count": self.generated,
            "eval_duration": now - first})

    def stop_hit(self) -> bool:
        return bool(self.text_ends) and self.text_ends[-1] == -1

    def embedded(self, vector: np.ndarray) -> None:
        self.done = True
        self.request.emit({"embedding": vector.tolist(),
                           "prompt_eval_count": self.prompt_eval_count})

    def fail(self, message: str, status: int | None = None) -> None:
        """End the sequence with an error; status: an HTTP status the request earned (a
        grammar past its limits: 400), where the runner's failure is not to blame."""
        if not self.done:
            self.done = True
            self.request.emit({"error": message, **({"status": status} if status else {})})


def truncate_prompt(tokens: list, limit: int, num_keep: int) -> list:
    """The first num_keep tokens and as much of the end as fits in limit (num_keep -1, the
    whole prompt, cannot be kept: then only the end). An image is kept or dropped whole."""
    if len(tokens) <= limit:
        return tokens
    keep = run_start(tokens, min(max(num_keep, 0), limit - 1))
    return tokens[:keep] + tokens[run_end(tokens, len(tokens) - (limit - keep)):]
