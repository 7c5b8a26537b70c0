"""Talking to a model registry (the OCI distribution API that Ollama's registry speaks, as
Ollama's server/images.go and server/download.go use it; Hugging Face's file API likewise):
small answers read whole, within their bounds, and blobs fetched by digest (download.py).

Every answer is read up to a bound (limits.py: a manifest 4 MiB, a token 64 KiB, an error's
body 4 KiB) and a small answer within RUNNER_PULL_TIMEOUT, headers included: each connection
reads through the pull's guard (guard.py), which also stops it when the pull is cancelled. A
registry that answers 401 with a Bearer challenge is asked for an anonymous token (the
Docker token flow), then asked again. Two pulls of one blob at once (two clients, or a
server and the CLI) take turns through a lock file beside it: the second finds it done.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

import httpx

from . import guard as guarding
from .answers import check_status, read_bounded, read_head
from .download import Download
from .errors import PullError, Refused
from .guard import Guard
from .limits import ERROR_MAX, MANIFEST_MAX, TOKEN_MAX, Limits
from .manifest import Manifest, loads, parse
from .names import ModelName

fcntl: ModuleType | None
try:
    import fcntl
except ImportError:                 # Windows: pulls take turns within one process only
    fcntl = None

__all__ = ["PullError", "Registry", "Remote"]

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
TIMEOUT = httpx.Timeout(30.0, connect=10.0)
CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


class Remote:
    """One host a pull talks to (and the hosts it redirects to), through the pull's guard;
    token: a Bearer token to send (else one is asked for on a challenge)."""

    def __init__(self, host: str, limits: Limits, guard: Guard, token: str | None = None):
        self.host, self.limits, self.guard, self.token = host, limits, guard, token
        self.client = guarding.client(guard, TIMEOUT)

    def close(self) -> None:
        self.client.close()

    def request(self, method: str, url: str, headers: dict | None = None) -> httpx.Response:
        """A streamed answer (a token fetched and the request repeated on a Bearer
        challenge); connection failures as PullError. The caller closes it."""
        headers = dict(headers or {})
        for attempt in range(2):
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            try:
                request = self.client.build_request(method, url, headers=headers)
                response = self.client.send(request, stream=True)
            except httpx.HTTPError as error:
                raise PullError(f"Could not reach the registry {self.host} "
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

    def answer(self, url: str, limit: int, what: str, headers: dict | None = None
               ) -> tuple[int, bytes]:
        """(status, body) of a small answer: its body read whole up to limit bytes (an
        error's up to ERROR_MAX); Refused when it is longer."""
        response = self.request("GET", url, headers)
        try:
            if response.status_code >= 400:
                return response.status_code, read_head(response, ERROR_MAX)
            return response.status_code, read_bounded(response, limit, what)
        finally:
            response.close()

    def _token(self, challenge: str) -> str:
        """An anonymous token from the challenge's realm (service and scope as given)."""
        fields = dict(CHALLENGE.findall(challenge))
        realm = fields.pop("realm", None)
        if not realm:
            raise PullError(f"The registry {self.host} wants a token but names no realm "
                            "to get one from.")
        refused = PullError(f"The registry {self.host} refused a token (is the model "
                            "private?).")
        try:
            response = self.client.send(self.client.build_request("GET", realm, params=fields),
                                        stream=True)
            try:
                if response.status_code >= 400:
                    raise refused
                found = loads(read_bounded(response, TOKEN_MAX, f"The token answer of "
                                                                f"{self.host}"),
                              f"The token answer of {self.host}")
            finally:
                response.close()
        except Refused as error:                    # the registry's fault: a 502
            raise PullError(str(error)) from None
        except httpx.HTTPError:
            raise refused from None
        token = found.get("token") or found.get("access_token") if isinstance(found, dict) \
            else None
        if not isinstance(token, str):
            raise refused
        return token

    def fetch(self, url: str, digest: str, size: int, blobs: Path,
              progress: Callable[[int], None]) -> Path:
        """The blob at url into blobs/sha256-<hex>, verified; progress(completed bytes) as
        it comes. Resumes parts a cut pull left."""
        target = blobs / f"sha256-{digest[7:]}"
        if target.exists():
            progress(size)
            return target
        blobs.mkdir(parents=True, exist_ok=True)
        try:
            with only_puller(target, self.guard):
                if not target.exists():            # else another pull fetched it meanwhile
                    Download(self, url, digest, size, target).run(progress)
                progress(size)
        except OSError as error:
            if error.errno == errno.ENOSPC:
                raise PullError(f"No space left on the disk of {blobs} while pulling "
                                f"{digest[:19]}; the parts fetched so far are kept for the "
                                "next pull. Free some space and pull again.", 507) from None
            raise PullError(f"Writing {digest[:19]} into {blobs} failed: {error}.") from None
        return target


class Registry(Remote):
    """A registry that speaks Ollama's API, for one model's pull."""

    def __init__(self, name: ModelName, insecure: bool = False, limits: Limits | None = None,
                 guard: Guard | None = None):
        if name.scheme == "http" and not insecure:
            raise PullError(f"{name.url()} is plain HTTP; pull with --insecure (or "
                            "\"insecure\": true) to allow it, as ollama pull does.", 400)
        super().__init__(name.host, limits or Limits(), guard or Guard(what=name.display))
        self.name = name

    def manifest(self) -> Manifest:
        """The model's manifest (its layers and config), checked; within answer_seconds."""
        name, seconds = self.name, self.limits.answer_seconds
        url = name.url("v2", name.namespace, name.model, "manifests", name.tag)
        with self.guard.deadline(seconds, f"The registry {self.host} took more than "
                                          f"{seconds:g} seconds to send the manifest of "
                                          f"{name.display}; pull again later "
                                          "(RUNNER_PULL_TIMEOUT sets the bound)."):
            status, body = self.answer(url, MANIFEST_MAX, f"The manifest of {name.display}",
                                       {"Accept": MANIFEST_TYPE})
        if status == 404:
            raise PullError(f"The registry {self.host} has no model {name.repository}:"
                            f"{name.tag} (pull model manifest: file does not exist).", 404)
        check_status(status, body, "the manifest")
        return parse(body, name.display)

    def blob_url(self, digest: str) -> str:
        return self.name.url("v2", self.name.namespace, self.name.model, "blobs", digest)


@contextlib.contextmanager
def only_puller(target: Path, guard: Guard) -> Iterator[None]:
    """Hold target's lock (one holder across threads and processes; waiting is cancelled
    with the pull). The lock file is removed by its holder on leaving: a waiter that then
    locks the removed file sees that it is no longer the one at the path, and locks anew."""
    in_process = _IN_PROCESS.setdefault(str(target), threading.Lock())
    while not in_process.acquire(timeout=guarding.POLL):
        guard.check()
    try:
        lock = target.with_name(f".{target.name}.lock")
        handle = _file_lock(lock, guard)
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
            handle.close()                           # which releases the flock
    finally:
        in_process.release()


def _file_lock(lock: Path, guard: Guard):
    while True:
        handle = open(lock, "a")
        if fcntl is None:
            return handle
        try:
            while not _try_flock(handle):
                guard.check()
                time.sleep(guarding.POLL)
            if _same_file(lock, handle):
                return handle
        except BaseException:
            handle.close()
            raise
        handle.close()


def _same_file(lock: Path, handle) -> bool:
    """Whether handle is still the file at lock's path (not one its holder removed)."""
    try:
        return os.stat(lock).st_ino == os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False


def _try_flock(handle) -> bool:
    assert fcntl is not None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


_IN_PROCESS: dict[str, threading.Lock] = {}         # a blob's lock in this process
