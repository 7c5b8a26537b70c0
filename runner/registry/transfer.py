"""Talking to a model registry (the OCI distribution API that Ollama's registry speaks, as
Ollama's server/images.go and server/download.go use it): a manifest by tag, blobs by
digest.

A blob is fetched in parts, in parallel (each Ollama's size: a sixteenth of the blob, at
least PART_MIN and at most PART_MAX), written in place into `sha256-<hex>-partial` beside
the store's blobs, each part's progress kept in `sha256-<hex>-partial-<N>` (JSON), so that a
pull cut short (a dropped connection, a killed process) resumes where each part stopped: a
broken transfer is retried from there (MAX_TRIES, backing off), and a later pull finds the
parts. Only a file whose sha256 is its digest is renamed to `sha256-<hex>`; one that is not
is removed. A registry that answers 401 with a Bearer challenge is asked for an anonymous
token (the Docker token flow), then asked again. Two pulls of one blob at once (two clients,
or a server and the CLI) take turns through a lock file beside it: the second finds it done.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Callable

import httpx

from ..loading import store
from .names import ModelName

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:                 # Windows: pulls take turns within one process only
    fcntl = None

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
PARTS, PART_MIN, PART_MAX = 16, 100 * 1000 * 1000, 1000 * 1000 * 1000
MAX_TRIES = 6
BACKOFF = 0.5                            # seconds before the second try, doubling after
TIMEOUT = httpx.Timeout(30.0, connect=10.0)
CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


class PullError(RuntimeError):
    """A pull that failed, in one sentence for the user; status: the HTTP status a server
    answers it with (400: the name or the request, 404: no such model, 502: the registry,
    507: the disk)."""

    def __init__(self, message: str, status: int = 502):
        super().__init__(message)
        self.status = status


class Registry:
    """One registry host, for one model's pull (its token, if it wanted one)."""

    def __init__(self, name: ModelName, insecure: bool = False):
        if name.scheme == "http" and not insecure:
            raise PullError(f"{name.url()} is plain HTTP; pull with --insecure (or "
                            "\"insecure\": true) to allow it, as ollama pull does.", 400)
        self.name = name
        self.client = httpx.Client(timeout=TIMEOUT, follow_redirects=True)
        self.token: str | None = None

    def close(self) -> None:
        self.client.close()

    def manifest(self) -> dict:
        """The model's manifest (its layers: mediaType, digest, size)."""
        url = self.name.url("v2", self.name.namespace, self.name.model, "manifests",
                            self.name.tag)
        response = self._request("GET", url, {"Accept": MANIFEST_TYPE})
        if response.status_code == 404:
            raise PullError(f"The registry {self.name.host} has no model "
                            f"{self.name.repository}:{self.name.tag} (pull model manifest: "
                            "file does not exist).", 404)
        _check(response, "the manifest")
        try:
            manifest = response.json()
            layers = [dict(layer, size=int(layer["size"])) for layer in manifest["layers"]]
        except (ValueError, KeyError, TypeError):
            raise PullError(f"The registry {self.name.host} sent a manifest for "
                            f"{self.name.display} that is not one (no list of layers).") from None
        if manifest.get("config", {}).get("digest"):
            layers.append(dict(manifest["config"], size=int(manifest["config"].get("size", 0))))
        for layer in layers:
            _hex_of(layer.get("digest", ""))            # a PullError unless sha256:<64 hex>
        return dict(manifest, layers=layers)

    def blob_url(self, digest: str) -> str:
        return self.name.url("v2", self.name.namespace, self.name.model, "blobs", digest)

    def fetch(self, digest: str, size: int, blobs: Path,
              progress: Callable[[int], None]) -> Path:
        """The blob into blobs/sha256-<hex>, verified; progress(completed bytes) as it
        comes. Resumes parts a cut pull left."""
        target = blobs / f"sha256-{_hex_of(digest)}"
        if target.exists():
            progress(size)
            return target
        blobs.mkdir(parents=True, exist_ok=True)
        try:
            with _only_puller(target):
                if not target.exists():            # else another pull fetched it meanwhile
                    Download(self, digest, size, target).run(progress)
                progress(size)
        except OSError as error:
            if error.errno == errno.ENOSPC:
                raise PullError(f"No space left on the disk of {blobs} while pulling "
                                f"{digest[:19]}; the parts fetched so far are kept for the "
                                "next pull. Free some space and pull again.", 507) from None
            raise PullError(f"Writing {digest[:19]} into {blobs} failed: {error}.") from None
        return target

    def _request(self, method: str, url: str, headers: dict | None = None,
                 stream: bool = False) -> httpx.Response:
        """One request (a token fetched and the request repeated on a Bearer challenge);
        connection failures as PullError."""
        headers = dict(headers or {})
        for attempt in range(2):
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            try:
                request = self.client.build_request(method, url, headers=headers)
                response = self.client.send(request, stream=stream)
            except httpx.HTTPError as error:
                raise PullError(f"Could not reach the registry {self.name.host} "
                                f"({type(error).__name__}: {error}); check the network and "
                                "the name, and pull again.") from None
            if response.status_code != 401 or attempt:
                return response
            challenge = response.headers.get("www-authenticate", "")
            response.close()
            if not challenge.lower().startswith("bearer"):
                return response
            self.token = self._token(challenge)
        return response

    def _token(self, challenge: str) -> str:
        """An anonymous token from the challenge's realm (service and scope as given)."""
        fields = dict(CHALLENGE.findall(challenge))
        realm = fields.pop("realm", None)
        if not realm:
            raise PullError(f"The registry {self.name.host} wants a token but names no realm "
                            "to get one from.")
        try:
            response = self.client.get(realm, params=fields)
            response.raise_for_status()
            return response.json()["token"]
        except (httpx.HTTPError, ValueError, KeyError):
            raise PullError(f"The registry {self.name.host} refused a token for "
                            f"{self.name.display} (is it private?).") from None


@contextlib.contextmanager
def _only_puller(target: Path):
    """Hold target's lock file (one holder across threads and processes); it is removed
    once target exists, after which whoever waited on it finds target and goes."""
    lock = target.with_name(f".{target.name}.lock")
    with _IN_PROCESS.setdefault(str(target), threading.Lock()), open(lock, "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if target.exists():
                with contextlib.suppress(FileNotFoundError):
                    lock.unlink()
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)


_IN_PROCESS: dict[str, threading.Lock] = {}         # a blob's lock in this process


def _check(response: httpx.Response, what: str) -> None:
    if response.status_code >= 400:
        response.read()
        raise PullError(f"The registry answered {response.status_code} for {what} "
                        f"({response.text[:200].strip() or 'no detail'}).")


def _hex_of(digest: str) -> str:
    found = re.fullmatch(r"sha256:([0-9a-f]{64})", str(digest))
    if not found:
        raise PullError(f"{digest!r} is not a sha256 digest; the manifest is not one this "
                        "runner trusts.")
    return found.group(1)


class Download:
    """One blob's parts, in flight or resumed."""

    def __init__(self, registry: Registry, digest: str, size: int, target: Path):
        self.registry, self.digest, self.size, self.target = registry, digest, size, target
        self.partial = target.with_name(target.name + "-partial")
        self.lock = threading.Lock()
        self.parts = self._resumed() or self._planned()
        self.completed = sum(part["completed"] for part in self.parts)

    def _part_files(self) -> list[Path]:
        return [path for path in self.partial.parent.glob(self.partial.name + "-*")
                if path.name.rsplit("-", 1)[1].isdigit()]

    def _planned(self) -> list[dict]:
        for stale in self._part_files():
            stale.unlink()
        each = min(max(self.size // PARTS, PART_MIN), PART_MAX)
        return [{"n": n, "offset": offset, "size": min(each, self.size - offset),
                 "completed": 0} for n, offset in enumerate(range(0, max(self.size, 1), each))]

    def _resumed(self) -> list[dict] | None:
        """The parts a cut pull recorded, if they still describe this blob."""
        if not self.partial.exists():
            return None
        try:
            parts = [json.loads(path.read_text()) for path in self._part_files()]
        except (OSError, ValueError):
            return None
        if not parts or sum(p["size"] for p in parts) != self.size:
            return None
        return sorted(parts, key=lambda p: p["offset"])

    def run(self, progress: Callable[[int], None]) -> None:
        fd = os.open(self.partial, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.truncate(fd, self.size)
            for part in self.parts:
                self._record(part)
            progress(self.completed)
            pending = [p for p in self.parts if p["completed"] < p["size"]]
            with ThreadPoolExecutor(max_workers=min(PARTS, max(1, len(pending)))) as pool:
                for done in [pool.submit(self._fetch_part, fd, p, progress) for p in pending]:
                    done.result()
        finally:
            os.close(fd)
        actual = store.sha256_of(self.partial)
        if actual != _hex_of(self.digest):
            self._discard()
            raise PullError(f"The blob {self.digest[:19]} from {self.registry.name.host} has "
                            f"sha256 {actual[:12]}, not its digest; it was removed and nothing "
                            "was stored. Pull again (if it persists, the registry serves a "
                            "corrupted file).")
        os.replace(self.partial, self.target)
        self._discard()

    def _fetch_part(self, fd: int, part: dict, progress: Callable[[int], None]) -> None:
        """The rest of one part, retried from where a broken transfer stopped."""
        for attempt in range(MAX_TRIES):
            try:
                self._stream(fd, part, progress)
                return
            except (httpx.HTTPError, PullError) as error:
                if attempt == MAX_TRIES - 1:
                    raise PullError(f"Pulling {self.digest[:19]} from "
                                    f"{self.registry.name.host} failed {MAX_TRIES} times "
                                    f"({error}); what arrived is kept, pull again to "
                                    "resume.") from None
                time.sleep(BACKOFF * 2 ** attempt)

    def _stream(self, fd: int, part: dict, progress: Callable[[int], None]) -> None:
        start, stop = part["offset"] + part["completed"], part["offset"] + part["size"]
        if start >= stop:
            return
        headers = {"Range": f"bytes={start}-{stop - 1}"}
        response = self.registry._request("GET", self.registry.blob_url(self.digest), headers,
                                          stream=True)
        try:
            _check(response, f"the blob {self.digest[:19]}")
            if response.status_code != 206 and start:
                raise PullError("the registry ignored the byte range asked for")
            position = start
            for chunk in response.iter_bytes():           # as they arrive
                chunk = chunk[:stop - position]
                os.pwrite(fd, chunk, position)
                position += len(chunk)
                with self.lock:                 # the reports in order, from any part
                    part["completed"] = position - part["offset"]
                    self.completed += len(chunk)
                    progress(self.completed)
                self._record(part)              # only what is written is claimed
                if position >= stop:
                    break
            if position < stop:
                raise PullError(f"the connection closed {stop - position} bytes early")
        finally:
            response.close()

    def _record(self, part: dict) -> None:
        path = self.partial.with_name(f"{self.partial.name}-{part['n']}")
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(part))
        os.replace(temporary, path)

    def _discard(self) -> None:
        for path in self.partial.parent.glob(self.partial.name + "*"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

