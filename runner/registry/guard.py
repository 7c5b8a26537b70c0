"""A pull's guard: what stops its connections, looked at by every read they make.

A registry that sends a byte a second never trips a per-read timeout, and a read blocked on
a silent socket does not see that the pull's clients left. So each connection a pull opens
reads through the guard: a read waits in slices of POLL seconds, and before each the guard
is asked whether the pull was cancelled (its event set) or the current step of this thread
passed its deadline (a manifest's answer, whole; a blob's stream between two stall_bytes);
either ends the read with the guard's PullError, wherever the read was: connecting, in the
headers, in the body.

httpx takes no network backend of its own, its connection pools do: `client()` hands each
pool of a new client a guarded one."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Iterator

import httpcore
import httpx

from .errors import Cancelled, PullError

POLL = 0.1                          # seconds a read waits between looks at the guard
log = logging.getLogger("runner.registry")


class Step:
    """A deadline for one step of one thread, and the sentence said when it passes."""

    def __init__(self, seconds: float, message: str):
        self.seconds, self.message = seconds, message
        self.until = time.monotonic() + seconds

    def renew(self) -> None:
        """Another `seconds` from now (a blob's stream made its progress)."""
        self.until = time.monotonic() + self.seconds


class Guard:
    """A pull's stop conditions: cancelled (the event, shared by its threads) and each
    thread's current step."""

    def __init__(self, cancelled: threading.Event | None = None, what: str = "the model"):
        self.cancelled = cancelled if cancelled is not None else threading.Event()
        self.what = what
        self._local = threading.local()

    @contextlib.contextmanager
    def deadline(self, seconds: float, message: str) -> Iterator[Step]:
        """A step of this thread that must end within seconds (else PullError(message))."""
        previous = getattr(self._local, "step", None)
        step = self._local.step = Step(seconds, message)
        try:
            yield step
        finally:
            self._local.step = previous

    def check(self) -> None:
        """PullError if the pull was cancelled or this thread's step passed its deadline."""
        if self.cancelled.is_set():
            raise Cancelled(f"The pull of {self.what} was cancelled: every client that asked "
                            "for it left. What arrived is kept; pull again to resume.")
        step = getattr(self._local, "step", None)
        if step is not None and time.monotonic() >= step.until:
            raise PullError(step.message)

    def wait(self, end: float | None) -> float:
        """How long a read may wait now: POLL, or less where end or the step comes first."""
        now = time.monotonic()
        limits = [POLL] + ([end - now] if end is not None else [])
        step = getattr(self._local, "step", None)
        if step is not None:
            limits.append(step.until - now)
        return max(0.001, min(limits))

    def clip(self, timeout: float | None) -> float | None:
        """timeout, no longer than this thread's step has left."""
        step = getattr(self._local, "step", None)
        if step is None:
            return timeout
        left = max(0.001, step.until - time.monotonic())
        return left if timeout is None else min(timeout, left)


class GuardedStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, guard: Guard):
        self.stream, self.guard = stream, guard

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            self.guard.check()
            try:
                return self.stream.read(max_bytes, self.guard.wait(end))
            except httpcore.ReadTimeout:
                if end is not None and time.monotonic() >= end:
                    raise

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.guard.check()
        self.stream.write(buffer, self.guard.clip(timeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, ssl_context, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        self.guard.check()
        return GuardedStream(self.stream.start_tls(ssl_context, server_hostname,
                                                   self.guard.clip(timeout)), self.guard)

    def get_extra_info(self, info: str):
        return self.stream.get_extra_info(info)


class GuardedBackend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend, guard: Guard):
        self.backend, self.guard = backend, guard

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None, socket_options=None
                    ) -> httpcore.NetworkStream:
        self.guard.check()
        return GuardedStream(self.backend.connect_tcp(
            host, port, self.guard.clip(timeout), local_address, socket_options), self.guard)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options=None) -> httpcore.NetworkStream:
        self.guard.check()
        return GuardedStream(self.backend.connect_unix_socket(
            path, self.guard.clip(timeout), socket_options), self.guard)

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


def client(guard: Guard, timeout: httpx.Timeout) -> httpx.Client:
    """An httpx client (redirects followed, the environment's proxies) whose every
    connection reads through guard. Answers are asked for unencoded: what is read is what
    is counted."""
    made = httpx.Client(timeout=timeout, follow_redirects=True,
                        headers={"Accept-Encoding": "identity"})
    transports = [made._transport, *(t for t in made._mounts.values() if t is not None)]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is None:
            log.warning("httpx's transport %s has no network backend to guard: this pull's "
                        "deadlines hold between reads only.", type(transport).__name__)
            continue
        pool._network_backend = GuardedBackend(backend, guard)   # type: ignore[union-attr]
    return made
