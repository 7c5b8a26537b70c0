"""The scheduler's compute thread: jobs in order, outcomes and errors handed back, several
waiters, shutdown and a dropped thread ending cleanly."""

from __future__ import annotations

import gc
import threading
import time

import pytest

from pyggml.worker import ComputeThread


def threads_named(name: str) -> int:
    return sum(t.name == name for t in threading.enumerate())


def test_jobs_run_on_the_thread_and_hand_back_values_and_errors():
    worker = ComputeThread("test-worker")
    try:
        job = worker.submit(threading.current_thread)
        assert job.result().name == "test-worker" and job.done()
        assert job.result().name == "test-worker"               # collected once, kept
        failing = worker.submit(int, "not a number")
        with pytest.raises(ValueError, match="invalid literal"):
            failing.result()
        assert worker.submit(sum, [1, 2, 3]).result() == 6         # the thread survived
    finally:
        worker.shutdown()


def test_a_job_is_refused_while_the_last_one_runs_and_taken_once_it_is_done():
    worker = ComputeThread("test-worker")
    release = threading.Event()
    try:
        running = worker.submit(release.wait, 10)
        with pytest.raises(RuntimeError, match="still running"):
            worker.submit(int, "1")
        release.set()
        while not running.done():
            time.sleep(0.001)
        assert worker.submit(int, "2").result() == 2               # the last one uncollected
        assert running.result() is True                            # its outcome stayed
    finally:
        worker.shutdown()


def test_several_threads_may_wait_for_one_job():
    worker = ComputeThread("test-worker")
    try:
        job = worker.submit(time.sleep, 0.05)
        results = []
        waiters = [threading.Thread(target=lambda: results.append(job.result()))
                   for _ in range(4)]
        for waiter in waiters:
            waiter.start()
        for waiter in waiters:
            waiter.join(5)
        assert results == [None] * 4
    finally:
        worker.shutdown()


def test_shutdown_waits_for_the_job_in_flight_and_a_dropped_thread_ends():
    worker = ComputeThread("test-worker-shutdown")
    job = worker.submit(time.sleep, 0.05)
    worker.shutdown()
    assert job.done() and job.result() is None
    assert threads_named("test-worker-shutdown") == 0
    with pytest.raises(RuntimeError, match="shut down"):
        worker.submit(int, "1")
    worker.shutdown()                                              # twice is harmless

    dropped = ComputeThread("test-worker-dropped")
    dropped.submit(int, "1")
    del dropped
    gc.collect()
    assert threads_named("test-worker-dropped") == 0
