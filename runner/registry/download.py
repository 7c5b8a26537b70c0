"""One blob's download: in parts, in parallel (each Ollama's size: a sixteenth of the blob, at
least PART_MIN and at most PART_MAX), written in place into `sha256-<hex>-partial` beside the
store's blobs, each begun part's progress kept in `sha256-<hex>-partial-<N>` (JSON), so that
a pull cut short (a dropped connection, a killed process, its clients gone) resumes where
each part stopped: a broken transfer is retried from there (MAX_TRIES, backing off), and a
later pull finds the parts. Only a file whose sha256 is its digest is renamed to
`sha256-<hex>`.

The plan is lazy: parts are taken in turn by PARTS workers, and a part's record is written
once its first bytes are, so a size costs nothing before the bytes come. Before any is
fetched, the size must fit on the disk; each answer must agree with it (Content-Range's
total, a whole answer's Content-Length) and bring stall_bytes every stall_seconds. A blob
that is refused (another size than its manifest says, or not its digest) leaves nothing; an
unfinished one older than partial_days is removed by the next pull (`sweep`)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import httpx

from ..loading import store
from .answers import check_status, read_head
from .errors import Cancelled, PullError, Refused
from .guard import POLL
from .limits import ERROR_MAX, free_bytes, megabytes

if TYPE_CHECKING:
    from .transfer import Remote

PARTS, PART_MIN, PART_MAX = 16, 100 * 1000 * 1000, 1000 * 1000 * 1000
MAX_TRIES = 6
BACKOFF = 0.5                            # seconds before the second try, doubling after
RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class Download:
    """One blob's parts, in flight or resumed."""

    def __init__(self, remote: "Remote", url: str, digest: str, size: int, target: Path):
        self.remote, self.url, self.digest, self.size = remote, url, digest, size
        self.partial = target.with_name(target.name + "-partial")
        self.target = target
        self.each = min(max(size // PARTS, PART_MIN), PART_MAX)
        self.count = max(1, -(-size // self.each))
        self.lock = threading.Lock()
        self.records = self._resumed()
        self.completed = sum(part["completed"] for part in self.records.values())

    def _part(self, n: int) -> dict:
        offset = n * self.each
        return {"n": n, "offset": offset, "size": min(self.each, self.size - offset),
                "completed": 0}

    def _plan(self) -> Iterator[dict]:
        """The parts left to fetch, in order, each made as it is taken."""
        for n in range(self.count):
            part = self.records.get(n) or self._part(n)
            if part["completed"] < part["size"]:
                yield part

    def _part_files(self) -> list[Path]:
        return [path for path in self.partial.parent.glob(self.partial.name + "-*")
                if path.name.rsplit("-", 1)[1].isdigit()]

    def _resumed(self) -> dict[int, dict]:
        """The parts a cut pull recorded, if they describe this blob's plan (else none)."""
        if not self.partial.exists():
            return {}
        records = {}
        try:
            for path in self._part_files():
                part = json.loads(path.read_text())
                expected = self._part(part["n"])
                if {k: part[k] for k in ("n", "offset", "size")} != \
                        {k: expected[k] for k in ("n", "offset", "size")} or \
                        type(part["completed"]) is not int or \
                        not 0 <= part["completed"] <= part["size"]:
                    return {}
                records[part["n"]] = part
        except (OSError, ValueError, KeyError, TypeError):
            return {}
        return records

    def run(self, progress: Callable[[int], None]) -> None:
        needed, free = self.size - self.completed, free_bytes(self.partial.parent)
        if needed > free:
            raise PullError(f"The blob {self.digest[:19]} needs {megabytes(needed)} more and "
                            f"the disk of {self.partial.parent} has {megabytes(free)} free; "
                            "free some space and pull again.", 507)
        try:
            fd = os.open(self.partial, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if not self.records:
                    os.truncate(fd, 0)            # a fresh start: what was there is stale
                    for stale in self._part_files():
                        stale.unlink()
                progress(self.completed)
                self._fetch_all(fd, progress)
            finally:
                os.close(fd)
        except Refused:
            self._discard()
            raise
        actual = store.sha256_of(self.partial)
        if actual != self.digest[7:]:
            self._discard()
            raise PullError(f"The blob {self.digest[:19]} from {self.remote.host} has "
                            f"sha256 {actual[:12]}, not its digest; it was removed and nothing "
                            "was stored. Pull again (if it persists, the registry serves a "
                            "corrupted file).")
        os.replace(self.partial, self.target)
        self._discard()

    def _fetch_all(self, fd: int, progress: Callable[[int], None]) -> None:
        """The parts left, PARTS at a time; the first failure stops the others."""
        plan, failed = self._plan(), threading.Event()

        def work() -> None:
            while not failed.is_set():
                with self.lock:
                    part = next(plan, None)
                if part is None:
                    return
                try:
                    self._fetch_part(fd, part, progress, failed)
                except BaseException:
                    failed.set()
                    raise

        pool = ThreadPoolExecutor(max_workers=min(PARTS, self.count))
        workers = [pool.submit(work) for _ in range(min(PARTS, self.count))]
        try:
            while futures.wait(workers, timeout=POLL).not_done:
                pass                  # waited in slices, so that Ctrl-C reaches this thread
        except BaseException:
            failed.set()              # the parts begun stop with the pull's guard
            raise
        finally:
            pool.shutdown(wait=False)
        errors = [error for error in (w.exception() for w in workers) if error is not None]
        if errors:                                    # the one that says most, first
            raise next((e for e in errors if isinstance(e, (Refused, Cancelled))), errors[0])

    def _fetch_part(self, fd: int, part: dict, progress: Callable[[int], None],
                    failed: threading.Event) -> None:
        """The rest of one part, retried from where a broken transfer stopped."""
        for attempt in range(MAX_TRIES):
            try:
                self._stream(fd, part, progress, failed)
                return
            except (Refused, Cancelled):
                raise
            except (httpx.HTTPError, PullError) as error:
                if failed.is_set():
                    return                            # another part failed: it is said
                if attempt == MAX_TRIES - 1:
                    raise PullError(f"Pulling {self.digest[:19]} from {self.remote.host} "
                                    f"failed {MAX_TRIES} times ({error}); what arrived is "
                                    "kept, pull again to resume.") from None
                time.sleep(BACKOFF * 2 ** attempt)

    def _stream(self, fd: int, part: dict, progress: Callable[[int], None],
                failed: threading.Event) -> None:
        start, stop = part["offset"] + part["completed"], part["offset"] + part["size"]
        if start >= stop:
            return
        limits, guard = self.remote.limits, self.remote.guard
        stalled = (f"the registry sent less than {megabytes(limits.stall_bytes)} in "
                   f"{limits.stall_seconds:g} seconds (RUNNER_PULL_STALL)")
        with guard.deadline(limits.stall_seconds, stalled) as step:
            response = self.remote.request("GET", self.url, {"Range":
                                                             f"bytes={start}-{stop - 1}"})
            try:
                self._check_answer(response, start)
                position, window = start, 0
                for chunk in response.iter_raw():                # as they arrive
                    chunk = chunk[:stop - position]
                    os.pwrite(fd, chunk, position)
                    position += len(chunk)
                    with self.lock:                 # the reports in order, from any part
                        part["completed"] = position - part["offset"]
                        self.completed += len(chunk)
                        progress(self.completed)
                    self._record(part)              # only what is written is claimed
                    window += len(chunk)
                    if window >= limits.stall_bytes:
                        step.renew()
                        window = 0
                    if position >= stop or failed.is_set():
                        break
                if position < stop and not failed.is_set():
                    raise PullError(f"the connection closed {stop - position} bytes early")
            finally:
                response.close()

    def _check_answer(self, response: httpx.Response, start: int) -> None:
        """The answer to a range: refused if it says the blob has another size."""
        status, what = response.status_code, f"the blob {self.digest[:19]}"
        if status == 416:
            raise Refused(f"The registry {self.remote.host} has fewer bytes of {what} than "
                          f"its manifest's {self.size:,}; nothing of it was kept.")
        if status >= 400:
            check_status(status, read_head(response, ERROR_MAX), what)
        whole = status != 206
        if whole and start:
            raise PullError("the registry ignored the byte range asked for")
        found = RANGE.fullmatch(response.headers.get("content-range", "").strip())
        total = (None if found is None or found.group(3) == "*" else int(found.group(3))) \
            if not whole else _length(response)
        if total is not None and total != self.size:
            raise Refused(f"The registry {self.remote.host} says {what} is {total:,} bytes, "
                          f"and its manifest {self.size:,}; nothing of it was kept.")
        if not whole and (found is None or int(found.group(1)) != start):
            raise PullError(f"the registry answered another range than bytes={start}-")

    def _record(self, part: dict) -> None:
        path = self.partial.with_name(f"{self.partial.name}-{part['n']}")
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(part))
        os.replace(temporary, path)

    def _discard(self) -> None:
        for path in self.partial.parent.glob(self.partial.name + "*"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def _length(response: httpx.Response) -> int | None:
    value = response.headers.get("content-length", "").strip()
    return int(value) if value.isdigit() else None


def sweep(blobs: Path, days: float) -> list[str]:
    """Remove the unfinished downloads in blobs whose newest file is older than days (a
    download in progress writes its records as its bytes come); the names removed."""
    if not blobs.is_dir():
        return []
    groups: dict[str, list[Path]] = {}
    for path in blobs.glob("sha256-*-partial*"):
        groups.setdefault(path.name.split("-partial", 1)[0], []).append(path)
    oldest = time.time() - days * 86400
    removed = []
    for paths in groups.values():
        try:
            newest = max(path.stat().st_mtime for path in paths)
        except FileNotFoundError:                    # finished or removed meanwhile
            continue
        if newest < oldest:
            for path in paths:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    removed.append(path.name)
    return sorted(removed)
