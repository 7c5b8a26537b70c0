"""A memory watchdog for probes that could grow a process without bound: it samples the
resident memory of a process and its children (a server and its runners, a CLI and its
conversion child) every few hundredths of a second, and when their sum passes the limit it
kills them all, so that a regression fails its test instead of swapping the machine.

    with MemoryWatchdog(server.proc.pid, limit_mib=1500) as watch:
        ... the probe ...
    # raises AssertionError naming the peak if the limit was passed

`grown_mib` is the peak above the memory at the start (what the probe cost)."""

from __future__ import annotations

import os
import signal
import threading

import psutil

INTERVAL = 0.05                  # seconds between samples


def tree_rss(pid: int) -> int:
    """The resident bytes of pid and its descendants (0 once they are gone)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            pass
    return total


class MemoryWatchdog:
    """Kills pid's process tree if its resident memory passes limit_mib; `peak_mib`,
    `grown_mib` and `tripped` say what it saw. As a context manager it raises AssertionError
    on leaving when it tripped (unless check=False)."""

    def __init__(self, pid: int, limit_mib: float, check: bool = True):
        self.pid, self.limit = pid, int(limit_mib * 2**20)
        self.check = check
        self.start = self.peak = tree_rss(pid)
        self.tripped = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    @property
    def peak_mib(self) -> float:
        return self.peak / 2**20

    @property
    def grown_mib(self) -> float:
        return (self.peak - self.start) / 2**20

    def _watch(self) -> None:
        while not self._stop.wait(INTERVAL):
            rss = tree_rss(self.pid)
            self.peak = max(self.peak, rss)
            if rss > self.limit:
                self.tripped = True
                self._kill()
                return

    def _kill(self) -> None:
        try:
            root = psutil.Process(self.pid)
            processes = [*root.children(recursive=True), root]
        except psutil.Error:
            return
        for process in processes:
            try:
                os.kill(process.pid, signal.SIGKILL)
            except OSError:
                pass

    def __enter__(self) -> "MemoryWatchdog":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if self.check and self.tripped:
            raise AssertionError(
                f"process {self.pid} and its children passed {self.limit / 2**20:.0f} MiB "
                f"(peak {self.peak_mib:.0f} MiB, {self.grown_mib:.0f} MiB above the start); "
                "the watchdog killed them")
