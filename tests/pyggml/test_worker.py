"""The scheduler's compute thread (C): a graph computed and its status handed back once,
a second one queued behind it with staged inputs and kept outputs (a third refused), a
failure holding back what was queued behind it, several waiters, shutdown and a dropped
thread ending cleanly, and a compute that starts while the submitting thread keeps Python's
lock."""

from __future__ import annotations

import gc
import sys
import threading
import time

import numpy as np
import pytest

import pyggml
import pyggml.profile  # noqa: F401 - defines pyggml_on_eval's Python side, which Gate takes
from pyggml import worker
from pyggml._lib import ffi, lib
from pyggml.worker import ComputeThread


class Doubling:
    """A scheduler and an allocated graph that doubles its input (1 CPU thread)."""

    def __init__(self):
        self.sched = pyggml.Scheduler([pyggml.cpu_backend(threads=1)])
        self.ctx = pyggml.Context()
        self.x = self.ctx.new_tensor("F32", (4, 6)).set_input()
        self.out = self.x.scale(2.0).set_output()         # may be computed in x's memory
        self.graph = self.ctx.graph(self.out)
        self.sched.alloc(self.graph)
        self.x.set(np.arange(24, dtype=np.float32).reshape(4, 6) + 1000.5)

    def submit(self, thread: ComputeThread):
        return thread.submit(self.sched.ptr, self.graph.ptr)

    def close(self):
        self.ctx.close()
        self.sched.close()


class Gate:
    """Holds a compute at its first node until opened (the scheduler's eval callback, which
    ggml calls from the computing thread)."""

    def __init__(self, sched: pyggml.Scheduler):
        self.sched, self.reached, self.opened = sched, threading.Event(), threading.Event()
        self._handle = ffi.new_handle(self)
        lib.ggml_backend_sched_set_eval_callback(sched.ptr, lib.pyggml_on_eval, self._handle)

    def on_eval(self, tensor, ask) -> bool:
        if ask:
            return True
        self.reached.set()
        return self.opened.wait(30)

    def close(self):
        self.opened.set()
        lib.ggml_backend_sched_set_eval_callback(self.sched.ptr, ffi.NULL, ffi.NULL)


@pytest.fixture
def doubling():
    found = Doubling()
    yield found
    found.close()


def test_a_compute_hands_back_its_status_once_and_the_thread_takes_the_next(doubling):
    thread = ComputeThread()
    try:
        job = doubling.submit(thread)
        assert job.result() == lib.GGML_STATUS_SUCCESS and job.done()
        assert job.result() == lib.GGML_STATUS_SUCCESS                 # collected once, kept
        np.testing.assert_array_equal(doubling.out.numpy()[0], [2001, 2003, 2005, 2007, 2009,
                                                                 2011])
        doubling.x.set(np.ones((4, 6), np.float32))
        assert doubling.submit(thread).result() == lib.GGML_STATUS_SUCCESS
        np.testing.assert_array_equal(doubling.out.numpy(), np.full((4, 6), 2))
    finally:
        thread.shutdown()


def test_a_compute_waits_behind_the_running_one_and_a_third_is_refused(doubling):
    thread, gate = ComputeThread(), Gate(doubling.sched)
    try:
        running = doubling.submit(thread)
        assert gate.reached.wait(30)
        queued = doubling.submit(thread)
        assert not running.done() and not queued.done()
        with pytest.raises(RuntimeError, match="already holds 2 jobs"):
            doubling.submit(thread)
        gate.opened.set()
        while not queued.done():
            time.sleep(0.001)
        gate.close()
        assert running.done()                                   # in the order submitted
        third = doubling.submit(thread)            # the oldest, done, is collected to make room
        assert third.result() == queued.result() == running.result() == lib.GGML_STATUS_SUCCESS
    finally:
        gate.close()
        thread.shutdown()


def test_a_queued_compute_takes_staged_inputs_and_keeps_outputs(doubling):
    """What a queued job reads is copied in as it starts, what the job before it made is
    copied out as that one ends: neither is disturbed by the other's use of the memory."""
    thread, gate = ComputeThread(), Gate(doubling.sched)
    try:
        first_out = np.zeros((4, 6), np.float32)
        first = thread.submit(doubling.sched.ptr, doubling.graph.ptr,
                              outputs=[(doubling.out, first_out)])
        assert gate.reached.wait(30)
        staged = np.full((4, 6), 7.0, np.float32)
        second = thread.submit(doubling.sched.ptr, doubling.graph.ptr,
                               inputs=[(doubling.x, staged)])
        gate.opened.set()
        assert second.result() == lib.GGML_STATUS_SUCCESS and first.done()
        np.testing.assert_array_equal(first_out[0], [2001, 2003, 2005, 2007, 2009, 2011])
        np.testing.assert_array_equal(doubling.out.numpy(), np.full((4, 6), 14))
    finally:
        gate.close()
        thread.shutdown()


def test_a_failed_compute_holds_back_the_one_queued_behind_it(doubling):
    """A queued job took the failed one's results for its own: it does not run (its staged
    inputs are never copied in). A job submitted once the failure was collected runs."""
    reached, opened = threading.Event(), threading.Event()

    def abort(_):                      # after the first node: hold, then fail the compute
        reached.set()
        return opened.wait(30)
    callback = ffi.callback("bool(void *)", abort)
    cpu = doubling.sched.backends[-1]
    lib.ggml_backend_cpu_set_abort_callback(cpu.ptr, callback, ffi.NULL)
    thread = ComputeThread()
    try:
        failing = doubling.submit(thread)
        assert reached.wait(30)
        held = thread.submit(doubling.sched.ptr, doubling.graph.ptr,
                             inputs=[(doubling.x, np.full((4, 6), 7.0, np.float32))])
        opened.set()
        assert held.result() == failing.result() == lib.GGML_STATUS_ABORTED
        assert not np.any(doubling.x.numpy() == 7)
        lib.ggml_backend_cpu_set_abort_callback(cpu.ptr, ffi.NULL, ffi.NULL)
        assert doubling.submit(thread).result() == lib.GGML_STATUS_SUCCESS
    finally:
        opened.set()
        lib.ggml_backend_cpu_set_abort_callback(cpu.ptr, ffi.NULL, ffi.NULL)
        thread.shutdown()


def test_several_threads_may_wait_for_one_compute(doubling):
    thread, gate = ComputeThread(), Gate(doubling.sched)
    try:
        job = doubling.submit(thread)
        results = []
        waiters = [threading.Thread(target=lambda: results.append(job.result()))
                   for _ in range(4)]
        for waiter in waiters:
            waiter.start()
        assert gate.reached.wait(30)
        gate.opened.set()
        for waiter in waiters:
            waiter.join(30)
        assert results == [lib.GGML_STATUS_SUCCESS] * 4
    finally:
        gate.close()
        thread.shutdown()


def test_shutdown_waits_for_the_compute_in_flight_and_a_dropped_thread_ends(doubling):
    before = worker.alive()
    thread, gate = ComputeThread(), Gate(doubling.sched)
    assert worker.alive() == before + 1
    job = doubling.submit(thread)
    assert gate.reached.wait(30)
    threading.Timer(0.1, gate.opened.set).start()
    thread.shutdown()                                      # returns once the compute ended
    assert job.done() and job.result() == lib.GGML_STATUS_SUCCESS
    assert worker.alive() == before
    with pytest.raises(RuntimeError, match="shut down"):
        doubling.submit(thread)
    thread.shutdown()                                              # twice is harmless
    gate.close()

    dropped = ComputeThread()
    doubling.submit(dropped)
    del dropped
    gc.collect()
    assert worker.alive() == before


def test_the_compute_starts_while_the_submitting_thread_keeps_pythons_lock(doubling):
    """The batch loop assembles the next batch in Python while a step computes. A compute
    thread that needed Python's lock to start would wait for that; this one does not: the
    result appears while this thread spins in pure Python, which never lets the lock go (its
    switch interval set far beyond the deadline)."""
    result = doubling.out.borrow()             # the output's host memory, not a copy
    thread = ComputeThread()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        job = doubling.submit(thread)
        deadline = time.monotonic() + 20
        while result[3, 5] != 2047.0 and time.monotonic() < deadline:
            pass
        computed = result[3, 5] == 2047.0
    finally:
        sys.setswitchinterval(interval)
    try:
        assert computed, "the compute did not run while this thread held Python's lock"
        assert job.result() == lib.GGML_STATUS_SUCCESS
    finally:
        thread.shutdown()
