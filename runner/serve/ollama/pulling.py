"""Pulls as the server runs them: each in a thread, its progress carried to the event loop,
and shared by the clients that asked for one name, so that a pull is cancelled when the
last of them leaves (its part files kept for the next pull to resume) and not before.

A client that reads slower than the bytes come holds the latest progress of the layer being
pulled, not every report: what waits for it is a few events, whatever the model's size."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from typing import Callable, Iterator

from ...registry.names import ModelName


class Claim:
    """One client's hold on a pull: released once (when it leaves, or when the pull ends)."""

    def __init__(self, claims: "Claims", key: str, held: list):
        self.claims, self.key, self.held = claims, key, held
        self.cancelled: threading.Event = held[0]
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.claims._release(self.key, self.held)


class Claims:
    """The pulls in flight by name, each with its clients: the last to leave sets the
    pull's cancelled event."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, list] = {}             # key -> [cancelled event, clients]

    @contextlib.contextmanager
    def joined(self, name: str) -> Iterator[Claim]:
        key = _key(name)
        with self._lock:
            held = self._held.setdefault(key, [threading.Event(), 0])
            held[1] += 1
        claim = Claim(self, key, held)
        try:
            yield claim
        finally:
            claim.release()

    def _release(self, key: str, held: list) -> None:
        with self._lock:
            held[1] -= 1
            if held[1] == 0:
                if self._held.get(key) is held:
                    del self._held[key]
                held[0].set()                # no client is left: whatever still runs stops


def _key(name: str) -> str:
    try:
        return ModelName.parse(name).display.lower()
    except ValueError:
        return str(name).strip().lower()


CLAIMS = Claims()
_LEFT: set[asyncio.Task] = set()              # the threads of pulls whose client left


async def reported(work, leave: Callable[[], None] = lambda: None):
    """What work(report), run in a thread, reports, as it comes (a progress report replacing
    the one before it of the same status while the client has not read it); what it raises
    is raised here once the reports before it are yielded. A client that leaves first calls
    leave() and does not wait for the thread."""
    loop, lock, ready = asyncio.get_running_loop(), threading.Lock(), asyncio.Event()
    pending: deque = deque()
    done = object()

    def report(event) -> None:
        with lock:
            if pending and _same_progress(pending[-1], event):
                pending[-1] = event
            else:
                pending.append(event)
        loop.call_soon_threadsafe(ready.set)

    def run():
        try:
            work(report)
        except Exception as error:                       # noqa: BLE001 - raised below
            report(Failed(error))
        finally:
            report(done)

    task = asyncio.create_task(asyncio.to_thread(run))
    finished = False
    try:
        while not finished:
            await ready.wait()
            ready.clear()
            with lock:
                events = list(pending)
                pending.clear()
            for event in events:
                if event is done:
                    finished = True
                    break
                if isinstance(event, Failed):
                    finished = True
                    raise event.error
                yield event
    finally:
        if finished:
            await task
        else:                                            # the client left
            leave()
            _LEFT.add(task)
            task.add_done_callback(_LEFT.discard)


def _same_progress(before, event) -> bool:
    return isinstance(before, dict) and isinstance(event, dict) and "completed" in before \
        and "completed" in event and before.get("status") == event.get("status")


class Failed:
    """An exception a reporting thread raised, carried to the event loop."""

    def __init__(self, error: Exception):
        self.error = error
