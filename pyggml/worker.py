"""The thread a scheduler computes on: a C thread (_build.py) that takes one graph at a time.

The thread that submits a graph goes on with Python (the batch loop assembles the next
batch meanwhile), holding Python's lock. A Python compute thread had to take that lock back
before it could start the compute, so each step started only when the submitter let go (a
decode step's 0.3 to 0.4 ms of assembling on a 2-core CPU, all of it before the compute, not
beside it). The C thread starts at once, and waiting for it releases the lock.
"""

from __future__ import annotations

import threading
import weakref

from ._lib import ffi, lib
from .errors import GGMLError


class Job:
    """A submitted compute; result() waits for it and returns its ggml status (collected once,
    then kept: several threads may wait)."""

    __slots__ = ("_state", "_status", "_lock", "_operands")

    def __init__(self, state: "_State", operands: tuple):
        self._state, self._status, self._lock = state, None, threading.Lock()
        self._operands = operands      # the scheduler and graph, alive while it computes

    def done(self) -> bool:
        if self._status is not None:
            return True
        with self._state.lock:
            return self._status is not None or \
                bool(lib.pyggml_compute_thread_done(self._state.ptr))

    def result(self) -> int:
        if self._status is None:
            with self._lock:
                if self._status is None:
                    self._status = lib.pyggml_compute_thread_collect(self._state.ptr)
                    self._operands = None
        return self._status


class _State:
    """What the owner and its finalizer share (the finalizer holds no reference to the owner,
    so an owner dropped unclosed still stops its thread)."""

    def __init__(self, ptr):
        self.ptr, self.job = ptr, None
        self.lock = threading.Lock()       # the pointer is freed under it


class ComputeThread:
    """Stopped by shutdown(), or when dropped, or at exit (after its compute in flight ends:
    ggml's memory must outlive it)."""

    def __init__(self):
        ptr = lib.pyggml_compute_thread_new()
        if ptr == ffi.NULL:
            raise GGMLError("Could not start a compute thread (out of memory or threads).")
        self._state = _State(ptr)
        self._stop = weakref.finalize(self, _stop, self._state)

    def submit(self, sched, cgraph) -> Job:
        """Start computing cgraph on sched (allocated, its inputs set), once the compute
        submitted before is done (its status stays with its Job)."""
        state = self._state
        if not self._stop.alive:
            raise RuntimeError("This compute thread was shut down.")
        if state.job is not None:
            if not state.job.done():
                raise RuntimeError("The compute thread is still running its last job.")
            state.job.result()
        if lib.pyggml_compute_thread_submit(state.ptr, sched, cgraph) != 0:
            raise RuntimeError("The compute thread refused the graph: its last job was not "
                               "collected.")
        state.job = Job(state, (sched, cgraph))
        return state.job

    def shutdown(self) -> None:
        """Wait for the compute in flight, if any, and stop the thread."""
        self._stop()


def alive() -> int:
    """How many compute threads run in this process."""
    return lib.pyggml_compute_threads_alive()


def _stop(state: _State) -> None:
    """Let the compute in flight end (its status stays with its Job), then end the thread."""
    if state.job is not None:
        state.job.result()
    with state.lock:
        ptr, state.ptr = state.ptr, None
        lib.pyggml_compute_thread_free(ptr)
