"""What a pull may cost: the size of every answer read from a registry or Hugging Face, the
time a small answer may take, the progress a blob's transfer must make, how long an
unfinished download is kept, and the room a layer needs on the disk.

A manifest is a few kilobytes (Ollama's largest are under 10 KiB); an answer is read only up
to its bound, and a registry that sends more is refused, so that one that never ends costs
the bound and no more. Deadlines hold whole answers, headers included: a registry that sends
a byte a second never trips a per-read timeout, so the pull's guard (guard.py) stops it."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

MiB = 1 << 20
MANIFEST_MAX = 4 * MiB       # a manifest, a config, a page of a file listing
TOKEN_MAX = 64 << 10         # a token answer (a JWT is a few kilobytes)
ERROR_MAX = 4 << 10          # what is read of an error's body (200 characters are shown)
LAYERS_MAX = 100             # layers in a manifest (Ollama's have a handful)
SIZE_MAX = 2**63 - 1         # a size Go's int64 holds (Ollama's registry writes them so)


@dataclass(frozen=True)
class Limits:
    """The bounds of one pull. answer_seconds: a manifest, token or file listing, whole;
    stall_seconds and stall_bytes: a blob's stream that brings fewer bytes in that long is
    cut and retried from where it stopped; partial_days: an unfinished download (its
    `-partial` files) older than that is removed at the next pull."""
    answer_seconds: float = 60.0
    stall_seconds: float = 30.0
    stall_bytes: int = 256 << 10
    partial_days: float = 7.0

    @classmethod
    def from_environment(cls) -> "Limits":
        """RUNNER_PULL_TIMEOUT, RUNNER_PULL_STALL (seconds), RUNNER_PULL_KEEP_PARTIAL
        (days), each else its default."""
        def seconds(name: str, default: float) -> float:
            value = os.environ.get(name, "")
            try:
                found = float(value) if value else default
            except ValueError:
                raise ValueError(f"{name} must be a number, not {value!r}.") from None
            if not found > 0:
                raise ValueError(f"{name} must be more than 0, not {value!r}.")
            return found

        return cls(answer_seconds=seconds("RUNNER_PULL_TIMEOUT", cls.answer_seconds),
                   stall_seconds=seconds("RUNNER_PULL_STALL", cls.stall_seconds),
                   partial_days=seconds("RUNNER_PULL_KEEP_PARTIAL", cls.partial_days))


def free_bytes(folder: Path) -> int:
    """The bytes free on folder's disk (of its nearest existing parent)."""
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return shutil.disk_usage(candidate).free
    return 0


def megabytes(count: int) -> str:
    return f"{count / 1e6:,.0f} MB" if count >= 1e6 else f"{count:,} bytes"
