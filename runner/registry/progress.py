"""Pull progress on a terminal: one tqdm bar per layer being pulled (events with a total),
a line for each other status; from any thread (transfers report from theirs)."""

from __future__ import annotations

import sys
import threading

from tqdm import tqdm


class Bars:
    def __init__(self, enabled: bool | None = None):
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.bars: dict[str, tqdm] = {}
        self.last: str | None = None
        self.lock = threading.Lock()

    def __call__(self, event: dict) -> None:
        with self.lock:
            status = event.get("status", "")
            if "total" not in event:
                if status != self.last:
                    print(status, file=sys.stderr, flush=True)
                self.last = status
                return
            if not self.enabled:
                return
            bar = self.bars.get(status)
            if bar is None:
                bar = self.bars[status] = tqdm(total=event["total"], unit="B", unit_scale=True,
                                               desc=status, file=sys.stderr)
            bar.update(event.get("completed", 0) - bar.n)

    def close(self) -> None:
        with self.lock:
            for bar in self.bars.values():
                bar.close()
