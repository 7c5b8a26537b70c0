"""The thread a scheduler computes on: one job at a time, handed over through two locks.

A decode step hands a compute to this thread and takes it back, twice per step. Through
concurrent.futures that cost about 170 us a step on a 2-core machine (a compute of a few
milliseconds has just evicted the pool's queue, work item, future and condition code from the
caches, and each runs a few hundred lines of Python); here each hand-off is one lock release
that wakes the other side (about 100 us for both).
"""

from __future__ import annotations

import threading
import weakref


class Job:
    """A submitted call; result() waits for it (once) and returns its value or raises."""

    __slots__ = ("_mailbox", "_outcome")

    def __init__(self, mailbox: "_Mailbox"):
        self._mailbox, self._outcome = mailbox, None

    def done(self) -> bool:
        return self._outcome is not None or self._mailbox.finished

    def result(self):
        if self._outcome is None:
            self._collect()
        value, error = self._outcome
        if error is not None:
            raise error
        return value

    def _collect(self) -> None:
        """Wait for the outcome and take it from the mailbox, which then takes a new job
        (several threads may wait: one collects)."""
        mailbox = self._mailbox
        with mailbox.collect_lock:
            if self._outcome is None:
                mailbox.finished_lock.acquire()      # the worker released it when done
                self._outcome, mailbox.outcome = mailbox.outcome, None
                mailbox.job, mailbox.finished = None, False


class _Mailbox:
    """What the owner and the thread share (the thread holds no reference to its owner, so
    an owner that is dropped unclosed still stops it)."""

    def __init__(self):
        self.start_lock, self.finished_lock = threading.Lock(), threading.Lock()
        self.collect_lock = threading.Lock()
        self.start_lock.acquire()                    # released: a job (or None: stop) is in
        self.finished_lock.acquire()                 # released: the job's outcome is in
        self.call = None
        self.job: Job | None = None                  # the job submitted and not collected
        self.outcome = None                          # (value, exception)
        self.finished = False                        # the outcome is in, not collected


def _serve(mailbox: _Mailbox) -> None:
    while True:
        mailbox.start_lock.acquire()
        call = mailbox.call
        if call is None:
            return
        function, args = call
        try:
            mailbox.outcome = (function(*args), None)
        except BaseException as error:              # noqa: BLE001 - handed to result()
            mailbox.outcome = (None, error)
        mailbox.call, mailbox.finished = None, True
        mailbox.finished_lock.release()


def _stop(mailbox: _Mailbox, thread: threading.Thread) -> None:
    """Let the job in flight end (its outcome stays with its Job), then end the thread."""
    job = mailbox.job
    if job is not None:
        job._collect()
    mailbox.call = None
    mailbox.start_lock.release()
    if thread is not threading.current_thread():
        thread.join()


class ComputeThread:
    """Stopped by shutdown(), or when dropped, or at exit (after its compute in flight ends:
    ggml's memory must outlive it)."""

    def __init__(self, name: str):
        self._mailbox = _Mailbox()
        self._thread = threading.Thread(target=_serve, args=(self._mailbox,), name=name,
                                        daemon=True)
        self._thread.start()
        self._stop = weakref.finalize(self, _stop, self._mailbox, self._thread)

    def submit(self, function, *args) -> Job:
        """Run function(*args) on the thread, once the job submitted before is done (its
        outcome stays with it)."""
        mailbox = self._mailbox
        if not self._stop.alive:
            raise RuntimeError("This compute thread was shut down.")
        if mailbox.job is not None:
            if not mailbox.job.done():
                raise RuntimeError("The compute thread is still running its last job.")
            mailbox.job._collect()
        mailbox.call = (function, args)
        job = mailbox.job = Job(mailbox)
        mailbox.start_lock.release()
        return job

    def shutdown(self) -> None:
        """Wait for the job in flight, if any, and stop the thread."""
        self._stop()
