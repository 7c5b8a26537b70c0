"""The batch loop: every active sequence advances through shared batches, on one thread.

Each iteration packs the pending inputs of the active sequences, round-robin up to the
batch size, so one sequence's prompt chunk shares a batch with the decode steps of others.
While batch N computes, batch N+1 is assembled and its graph built; a sequence waiting for
N's logits gets a placeholder in N+1 that is filled with its sampled token before N+1 is
launched. Only the choice of tokens stands between two computes: N's tokens are counted and
their text streamed while N+1 computes. Chained on a device (flight.py, executor.py), even
the choice comes after: N+1 takes N's greedy tokens there and is launched first. A sequence
that ended meanwhile leaves its row of N+1 to be computed and dropped.

Slots and the KV cache are touched only by this thread; requests come in through submit()
and leave through their emit() callbacks; cancel() on a request is seen before the next step.
"""

from __future__ import annotations

import itertools
import logging
import threading
import weakref
from collections import deque

import numpy as np

from ..kvcache import HybridCache
from ..multimodal.axes import axes, position_at
from ..multimodal.media import attach_media, runs, token_ids
from ..tokenizer import Tokenizer
from .batch import Batch
from .checkpoints import cut_points
from .executor import Executor
from .flight import PLACEHOLDER, Entry, Flight, pack
from .pooling import pool
from .request import Active, Request
from .shift import shift_context
from .slots import InputCache

log = logging.getLogger("runner.engine")


class Engine:
    def __init__(self, executor: Executor, tokenizer: Tokenizer, parallel: int = 1,
                 batch_size: int = 512, multiuser: bool = False, overlap: bool = True,
                 pooling: str | None = None):
        """pooling: the model makes embeddings (mean, cls or last); every request is then an
        embedding request, evaluated without the prompt cache."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, not {batch_size}.")
        self.executor, self.kv, self.tokenizer = executor, executor.kv, tokenizer
        self.cache = InputCache(self.kv, parallel, multiuser)
        self.batch_size, self.overlap, self.pooling = batch_size, overlap, pooling
        # an encoder (not causal) sees its whole prompt at once: one batch per prompt
        self.causal = executor.model.causal
        self.axes = executor.model.position_axes()     # > 1: M-RoPE (multimodal/axes.py)
        self.waiting: deque[Request] = deque()
        self.active: list[Active] = []
        self.in_flight: Flight | None = None
        self._next: Flight | None = None
        self._turn = 0
        self._blocks = itertools.count()        # ids of the images placed in batches
        self._cond = threading.Condition()
        self._accepting, self._stopping = True, False
        self._stop_message = "The runner stopped."
        self._thread: threading.Thread | None = None

    @property
    def context(self) -> int:
        """The most tokens one sequence may hold."""
        return self.cache.context

    # -- outside the loop thread ------------------------------------------------------------

    def submit(self, *requests: Request) -> None:
        """Queue requests; they wait for free slots. Several given at once are admitted
        together (as far as slots allow), so they start in the same batch. Raises ValueError
        for a prompt that is empty or longer than the context."""
        for request in requests:
            request.check_fits(self.context, self.batch_size, self.causal)
        with self._cond:
            if not self._accepting:
                raise RuntimeError("The runner is shutting down and takes no new requests.")
            self.waiting.extend(requests)
            self._cond.notify()

    def reserve(self) -> None:
        """Size the compute memory for a full batch now (before the loop starts), so a long
        prompt later cannot run out of it mid-request."""
        step = self.executor.worst_case(min(self.batch_size, self.context),
                                        self.pooling is not None)
        try:
            self.executor.scheduler.reserve(step.graph)
        finally:
            self.kv.remove(0)
            step.ctx.close()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="batch-loop", daemon=True)
        self._thread.start()
        _stop_before_exit(weakref.ref(self))

    def drain(self) -> None:
        """Take no new requests; the queued ones are refused, the active ones go on."""
        with self._cond:
            self._accepting = False
            while self.waiting:
                self.waiting.popleft().emit({"error": "The runner is shutting down."})
            self._cond.notify()

    def end_active(self, message: str) -> None:
        """Cut every active sequence short with an error event (at its next step)."""
        with self._cond:
            for active in list(self.active):
                active.request.cancel(message)
            self._cond.notify()

    def stop(self, message: str = "The runner stopped.") -> None:
        """End the loop; active sequences end with an error event carrying message."""
        with self._cond:
            self._stopping, self._stop_message = True, message
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    @property
    def busy(self) -> bool:
        return not self.cache.free()

    # -- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self.waiting or self.active or self.in_flight or self._stopping):
                    self._cond.wait()
                if self._stopping:
                    self.executor.scheduler.wait()
                    for active in self.active:
                        active.fail(self._stop_message)
                    return
            try:
                self._iterate()
            except Exception as error:           # noqa: BLE001 - the loop must survive
                log.exception("A batch failed.")
                self._fail(error)

    def _iterate(self) -> None:
        with self._cond:
            self._reap()
            self._admit()
        flight = self.in_flight
        if flight is None:
            self._shift_full()
            self.in_flight = self._assemble()
            if self.in_flight is not None:
                self._launch(self.in_flight)
            return
        full = any(self._needs_shift(a) for a in self.active) or self._fills_up(flight)
        self._next = self._assemble() if self.overlap and not full else None
        if self._next is not None and self._next.sources is not None:
            self.in_flight, self._next = self._next, None
            self._launch(self.in_flight)        # queued behind the flight on the device
            self._take_handed_on(flight, self.in_flight)
        else:
            self._choose(flight)
            self.in_flight, self._next = self._next, None
            if self.in_flight is not None:
                self._launch(self.in_flight)
        self._record(flight)

    def _reap(self) -> None:
        """Drop sequences whose client went away (done reason 'closed') or that were cut
        short (an error event)."""
        if any(r.cancelled.is_set() for r in self.waiting):
            self.waiting = deque(r for r in self.waiting if not r.cancelled.is_set())
        for active in list(self.active):
            if active.request.cancelled.is_set():
                if active.request.abort_message:
                    active.fail(active.request.abort_message)
                self._end(active, "closed")

    def _admit(self) -> None:
        while self.waiting:
            taken = self.cache.acquire(self.waiting[0].tokens, reuse=self.pooling is None)
            if taken is None:
                return
            slot, reused = taken
            request = self.waiting.popleft()
            active = Active(request, slot, reused, self.tokenizer)
            if self.kv.keeps_checkpoints and self.pooling is None:
                assert isinstance(self.kv, HybridCache)    # the cache that keeps them
                active.cuts = cut_points(request.tokens, reused, self.tokenizer.is_special,
                                         self.kv.checkpoints)
            self.active.append(active)

    def _needs_shift(self, active: Active) -> bool:
        return bool(active.pending) and \
            len(active.slot.tokens) + len(active.pending) > self.context

    def _fills_up(self, flight: Flight) -> bool:
        """Whether a sequence sampling from the flight has no cell left for its next token:
        it shifts once the flight is done, and the next batch waits for that (assembled
        now, it would leave the sequence out, a step behind the others from then on)."""
        return not self.pooling and any(e.rows and len(e.active.slot.tokens) >= self.context
                                        for e in flight.entries)

    def _shift_full(self) -> None:
        """With nothing computing: shift (or end) the sequences whose context is full."""
        for active in [a for a in self.active if self._needs_shift(a)]:
            options = active.request.options
            if not options.shift or options.num_predict == -2 or \
                    not shift_context(active, self.cache, self.executor, self.axes):
                self._end(active, "length")

    def _assemble(self) -> Flight | None:
        """Round-robin over the active sequences up to the batch size; place the batch in
        the cache and build its graph."""
        # sequences that sample from the flight in progress: a placeholder each
        awaiting = set() if self.pooling else \
            {id(e.active) for e in (self.in_flight.entries if self.in_flight else ()) if e.rows}
        order = self.active[self._turn % len(self.active):] + \
            self.active[:self._turn % len(self.active)] if self.active else []
        self._turn += 1
        entries = pack([a for a in order if not (a.done or self._needs_shift(a))], awaiting,
                       self.batch_size, self.context, whole=not self.causal,
                       all_rows=self.pooling is not None)
        if not entries:
            return None
        flight = Flight.of(entries)
        self._add_media(flight.batch, flight.items)
        if self.axes > 1:
            flight.batch.axes = np.concatenate([self._axes(e) for e in entries], axis=1)
        if self.executor.chains and self.in_flight is not None:
            flight.sources = flight.chain_from(self.in_flight)
        flight.step = self.executor.build(flight.batch, self.pooling is not None,
                                          flight.needs == "candidates",
                                          chained=flight.sources is not None)
        for entry in entries:                   # a batch that ends at a cut keeps its state
            end = entry.start + len(entry.tokens)
            if end in entry.active.cuts:
                self.kv.checkpoint(entry.active.slot.id, end)
        return flight

    def _axes(self, entry: Entry) -> np.ndarray:
        """The rope positions (AXES, n) of an entry's tokens, walking its slot's tokens on
        from where the last walk ended."""
        slot, start, end = entry.active.slot, entry.start, entry.start + len(entry.tokens)
        found, after = axes(slot.tokens, start, end,
                            position_at(slot.tokens, start, slot.axes_known))
        slot.axes_known = (end, after)
        return found

    def _add_media(self, batch: Batch, items: list) -> None:
        """The batch's image rows, encoding the images not encoded yet: the encoder shares
        the backends of the compute in flight, so that finishes first."""
        found = runs(items)
        if found and not all(media.ready for _, _, media in found):
            self.executor.scheduler.wait()
        attach_media(batch, items, self._blocks)

    def _launch(self, flight: Flight) -> None:
        """Fill placeholders with the tokens just sampled (unless the device hands them on),
        then start the compute."""
        for entry in flight.entries if flight.sources is None else ():
            if not entry.sampled:
                continue
            active = entry.active
            token = 0 if active.done else active.pending.pop()
            entry.tokens = [token]
            if not active.done:
                active.slot.tokens[entry.start] = token
        assert flight.step is not None                    # _assemble built it
        self.executor.launch(flight.step, token_ids(flight.items), flight.sources)

    def _choose(self, flight: Flight) -> None:
        """Wait for the flight and pick the next token of each sequence that asked for one;
        a sequence that reached num_predict or an end token ends here."""
        step = flight.step
        assert step is not None                           # launched
        # what the device picked, where it did (a GPU or RPC device), else the logits
        picked = {"choices": step.choices, "candidates": step.candidates}.get(flight.needs)
        read = flight.needs if picked is not None else "logits"
        # logits in host memory are sampled from where they lie, unless logprobs are read
        # from them after the next launch; embeddings keep their rows past the next step
        logprobs = any(flight.entries[i].active.request.logprobs for i in flight.output_rows)
        rows = self.executor.finish(step, reuse=self.pooling is None, read=read,
                                    borrow=not (self.pooling or logprobs))
        self.in_flight = None
        for entry in flight.entries:
            entry.active.placed -= 1
        if self.pooling:
            flight.rows = rows
            return
        for row, index in enumerate(flight.output_rows):
            active = flight.entries[index].active
            if active.done:
                continue
            if read == "choices":
                reason = active.choose(chosen=int(rows[row]))
            elif read == "candidates":
                reason = active.choose(candidates=(rows[0][row], rows[1][row]))
            else:
                reason = active.choose(rows[row])
            if reason is not None:
                self._end(active, reason)

    def _take_handed_on(self, flight: Flight, following: Flight) -> None:
        """The tokens the flight chose, as the following one (launched) took them on the
        device; a sequence that reached num_predict or an end token ends here, its row of
        the following flight computed and dropped."""
        assert following.step is not None and flight.step is not None     # both launched
        handed = self.executor.handed_on(following.step, flight.step)
        for entry in flight.entries:
            entry.active.placed -= 1
        at = following.sampled_rows()
        for index in flight.output_rows:
            active = flight.entries[index].active
            if active.done:
                continue
            entry, row = at[id(active)]
            entry.tokens = [int(handed[row])]
            reason = active.choose(chosen=entry.tokens[0])
            active.pending = []                  # evaluating already
            if reason is None:
                active.slot.tokens[entry.start] = entry.tokens[0]
            else:
                self._end(active, reason)        # its cell stays a placeholder: dropped

    def _record(self, flight: Flight) -> None:
        """Count and stream the tokens chosen from the flight (the next one may be computing
        meanwhile: a sequence a stop string ends drops its row there), or pool embeddings."""
        for row, index in enumerate(flight.output_rows):
            active = flight.entries[index].active
            if active.done:
                continue
            if self.pooling:
                assert flight.rows is not None            # _choose read them
                active.hidden.append(flight.rows[row])
            elif (reason := active.record()) is not None:
                self._drop_sampled(active)
                self._end(active, reason)
        flight.rows = None
        if self.pooling:
            for entry in flight.entries:
                active = entry.active
                if not active.done and not active.pending and not active.placed:
                    active.embedded(pool(np.stack(active.hidden), self.pooling))
                    self._end(active, "stop")
        for entry in flight.entries:
            if entry.active.done and entry.active not in self.active:
                self._settle(entry.active)

    def _drop_sampled(self, active: Active) -> None:
        """The token active's last choice placed in the flight now computing is not kept:
        its cell is given back with the rest once the flight ends."""
        for entry in self.in_flight.entries if self.in_flight else ():
            if entry.active is active and entry.sampled:
                active.slot.tokens[entry.start] = PLACEHOLDER

    def _end(self, active: Active, reason: str) -> None:
        """Finish a sequence; the cache keeps what it evaluated, less a stop string's
        tokens. Its slot is freed once no flight writes it."""
        active.finish(reason)
        if active in self.active:
            self.active.remove(active)
        tokens = active.slot.tokens
        evaluated = tokens.index(PLACEHOLDER) if PLACEHOLDER in tokens else len(tokens)
        # embeddings leave nothing in the cache
        active.keep = 0 if self.pooling else evaluated - active.stop_tokens_cached()
        self._settle(active)

    def _settle(self, active: Active) -> None:
        """Free a finished sequence's slot, unless a flight still writes its cells."""
        slot = active.slot
        held = any(e.active is active for f in (self.in_flight, self._next) if f
                   for e in f.entries)
        if not held and slot.busy:
            kept = self.cache.truncate(slot, active.keep)
            self.kv.checkpoint(slot.id, kept)       # where the reply ends
            self.cache.release(slot)
            with self._cond:
                self._cond.notify()

    def _fail(self, error: Exception) -> None:
        """A batch failed: the sequences it held end with an error; the others go on."""
        try:
            self.executor.scheduler.wait()
        except Exception:                        # noqa: BLE001 - already failing
            pass
        for flight in (self.in_flight, self._next):
            if flight is not None and flight.step is not None:
                self.executor.abandon(flight.step)
        self.executor.forget()
        lost = {e.active for f in (self.in_flight, self._next) if f for e in f.entries}
        self.in_flight = self._next = None
        for active in lost | {a for a in self.active if a.placed}:
            active.fail(f"The batch failed: {error}")
            if active in self.active:
                self.active.remove(active)
            if active.slot.busy:
                self.cache.truncate(active.slot, 0)
                self.cache.release(active.slot)


def _stop_before_exit(loop_ref) -> None:
    """At exit the pool that runs graphs stops taking work; a loop still running (a model
    never closed) is stopped first, so that it does not die mid-launch. Functions registered
    here run before the pool's own, last registered first (threading's private hook, which
    concurrent.futures uses for the same reason)."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        return

    def stop() -> None:
        loop = loop_ref()
        if loop is not None:
            loop.stop("The interpreter is exiting.")
    register(stop)
