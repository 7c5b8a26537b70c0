"""A conversion in a bounded child: past its time it is killed, its caller cancelled it is
killed, past its memory it ends with a sentence; its own error is its sentence. The child
that never ends is a real conversion whose config.json is a pipe nobody writes to."""

from __future__ import annotations

import asyncio
import os

import psutil
import pytest

from runner.serve.library.child import Bounds, ChildFailed, bounds_for, run_bounded

ROOMY = 2 * 2**30                  # bytes: more than a conversion of nothing needs


@pytest.fixture
def stuck(tmp_path):
    """A checkpoint folder whose config.json, a pipe, blocks its reader for ever."""
    os.mkfifo(tmp_path / "config.json")
    return tmp_path


def children() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def test_a_child_past_its_time_is_killed_with_a_sentence(stuck):
    with pytest.raises(ChildFailed, match=r"^The conversion took longer than its bound of 2 s "
                                          r"and was stopped\.$"):
        asyncio.run(run_bounded(["convert", str(stuck)], Bounds(ROOMY, 2)))
    assert psutil.wait_procs(children(), timeout=30)[1] == []


def test_a_child_whose_caller_is_cancelled_is_killed(stuck):
    async def cancelled() -> psutil.Process:
        task = asyncio.ensure_future(run_bounded(["convert", str(stuck)], Bounds(ROOMY, 600)))
        while not children():                        # the child has started
            await asyncio.sleep(0.05)
        child = children()[0]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        while child.is_running():                    # killed, and reaped by the event loop
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.1)                     # which then closes its pipes
        return child

    child = asyncio.run(asyncio.wait_for(cancelled(), 60))
    assert not child.is_running()


def test_a_child_past_its_memory_ends_with_a_sentence(stuck):
    with pytest.raises(ChildFailed, match=r"^The conversion needed more memory than its bound "
                                          r"of 8 MiB\.$"):
        asyncio.run(asyncio.wait_for(
            run_bounded(["convert", str(stuck)], Bounds(8 * 2**20, 600)), 60))


def test_a_child_s_own_error_is_its_sentence(tmp_path):
    with pytest.raises(ChildFailed, match=r"^.* has no config\.json\.$"):
        asyncio.run(asyncio.wait_for(
            run_bounded(["convert", str(tmp_path)], Bounds(ROOMY, 600)), 120))


def test_the_bounds_grow_with_the_input():
    small, large = bounds_for(0), bounds_for(16 * 2**30)
    assert small.memory == 2 * 2**30 and small.seconds == 600
    assert large.memory == small.memory + 64 * 2**30 and large.seconds == 600 + 16 * 60
