"""The thread a scheduler computes on: a C thread (cdefs/compute_thread.c) that runs graphs.

The thread that submits a graph goes on with Python (the batch loop assembles the next
batch meanwhile), holding Python's lock. A Python compute thread had to take that lock back
before it could start the compute, so each step started only when the submitter let go (a
decode step's 0.3 to 0.4 ms of assembling on a 2-core CPU, all of it before the compute, not
beside it). The C thread starts at once, and waiting for it releases the lock. A graph may
also wait there behind the one computing, its inputs staged in host memory, so that the next
step starts the moment the last ends.
"""

from __future__ import annotations

import threading
import weakref

from ._lib import ffi, lib
from .errors import GGMLError


class Job:
    """A submitted compute; result() waits for it and returns its ggml status (collected once,
    then kept: several threads may wait). Jobs are collected in the order submitted: the
    result of one collects the ones before it first."""

    __slots__ = ("_state", "ticket", "_status", "_operands")

    def __init__(self, state: "_State", ticket: int, operands: tuple):
        self._state, self.ticket = state, ticket
        self._status: int | None = None
        # the scheduler, graph and copies, alive while it computes
        self._operands: tuple | None = operands

    def done(self) -> bool:
        if self._status is not None:
            return True
        state = self._state
        with state.lock:
            return self._status is not None or \
                bool(lib.pyggml_compute_thread_done(state.ptr, self.ticket))

    def result(self) -> int:
        if self._status is None:
            _collect_through(self._state, self)
        assert self._status is not None     # collected: _collect_through set it
        return self._status


class _State:
    """What the owner and its finalizer share (the finalizer holds no reference to the owner,
    so an owner dropped unclosed still stops its thread)."""

    def __init__(self, ptr):
        self.ptr = ptr
        self.jobs: list[Job] = []          # submitted, not collected, oldest first
        self.lock = threading.Lock()       # the pointer is freed under it
        self.collecting = threading.Lock()


class ComputeThread:
    """Runs submitted graphs one after another; up to QUEUE are submitted and not collected
    (compute_thread.c). Stopped by shutdown(), or when dropped, or at exit (after its jobs
    end: ggml's memory must outlive them)."""

    QUEUE = 2

    def __init__(self):
        ptr = lib.pyggml_compute_thread_new()
        if ptr == ffi.NULL:
            raise GGMLError("Could not start a compute thread (out of memory or threads).")
        self._state = _State(ptr)
        self._stop = weakref.finalize(self, _stop, self._state)

    def submit(self, sched, cgraph, inputs=(), outputs=()) -> Job:
        """Compute cgraph on sched (allocated, its inputs set or staged) once the jobs
        submitted before it are done. inputs: (tensor, contiguous array) pairs copied into
        the graph as it starts; outputs: (tensor, array) pairs copied out as it ends."""
        state = self._state
        if not self._stop.alive:
            raise RuntimeError("This compute thread was shut down.")
        if len(state.jobs) >= self.QUEUE:
            if not state.jobs[0].done():
                raise RuntimeError(f"The compute thread already holds {self.QUEUE} jobs.")
            state.jobs[0].result()
        staged, kept = _copies(inputs), _copies(outputs)
        ticket = lib.pyggml_compute_thread_submit(state.ptr, sched, cgraph,
                                                  staged[0], len(inputs), kept[0], len(outputs))
        if ticket == 0:
            raise RuntimeError("The compute thread refused the graph: too many jobs are not "
                               "collected.")
        job = Job(state, ticket, (sched, cgraph, staged, kept))
        state.jobs.append(job)
        return job

    def shutdown(self) -> None:
        """Wait for the jobs submitted, if any, and stop the thread."""
        self._stop()


def _collect_through(state: _State, job: Job | None) -> None:
    """Collect the jobs submitted before job, then job (None: every job submitted)."""
    with state.collecting:
        while state.jobs and (job is None or job._status is None):
            oldest = state.jobs.pop(0)
            oldest._status = lib.pyggml_compute_thread_collect(state.ptr, oldest.ticket)
            oldest._operands = None


def _copies(pairs) -> tuple:
    """(pyggml_copy[] or NULL, the arrays it points at) for (tensor, array) pairs."""
    if not pairs:
        return ffi.NULL, ()
    copies = ffi.new("pyggml_copy[]", len(pairs))
    for copy, (tensor, array) in zip(copies, pairs):
        copy.tensor, copy.data, copy.size = tensor.ptr, ffi.from_buffer(array), array.nbytes
    return copies, [array for _, array in pairs]


def alive() -> int:
    """How many compute threads run in this process."""
    return lib.pyggml_compute_threads_alive()


def _stop(state: _State) -> None:
    """Let the jobs submitted end (their statuses stay with their Jobs), then end the
    thread."""
    _collect_through(state, None)
    with state.lock:
        ptr, state.ptr = state.ptr, None
        lib.pyggml_compute_thread_free(ptr)
