"""Pulls as the server runs them: a client that reads slower than the bytes come is left the
latest progress, not every report; and a pull two clients share is cancelled when the second
leaves, not the first."""

from __future__ import annotations

import asyncio
import threading

from runner.serve.ollama.pulling import Claims, reported


def test_a_slow_reader_is_left_the_latest_progress_not_every_report():
    go, finished = threading.Event(), threading.Event()

    def work(report):
        report({"status": "pulling manifest"})
        go.wait(30)
        for completed in range(100_000):
            report({"status": "pulling abc", "total": 100_000, "completed": completed})
        report({"status": "success"})
        finished.set()

    async def read():
        events = reported(work)
        first = await events.__anext__()
        go.set()
        while not finished.is_set():                 # the client reads nothing meanwhile
            await asyncio.sleep(0.01)
        return [first] + [event async for event in events]

    events = asyncio.run(read())
    assert events[0] == {"status": "pulling manifest"} and events[-1] == {"status": "success"}
    progress = [event["completed"] for event in events if "completed" in event]
    assert progress[-1] == 99_999 and len(progress) < 10


def test_a_shared_pull_is_cancelled_when_its_last_client_leaves():
    claims = Claims()
    with claims.joined("tiny") as first:
        with claims.joined("library/tiny:latest") as second:      # the same model
            assert first.cancelled is second.cancelled
            first.release()                                      # the first client left
            assert not second.cancelled.is_set()
        assert second.cancelled.is_set()
    with claims.joined("tiny") as again:                         # a new pull, a new event
        assert not again.cancelled.is_set()
