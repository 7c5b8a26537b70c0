"""Reading a registry's answers within their bounds: a small answer whole up to its limit
(refused past it, whatever its Content-Length says), an error's body no further than its
first bytes, an error status as a sentence."""

from __future__ import annotations

import contextlib

import httpx

from .errors import PullError, Refused


def read_bounded(response: httpx.Response, limit: int, what: str) -> bytes:
    """The whole body, refused (what: "The manifest of x") past limit bytes, whatever its
    Content-Length says; read as it comes, so a body that never ends costs limit bytes."""
    declared = response.headers.get("content-length", "")
    too_long = Refused(f"{what} is more than {_size(limit)}; it was refused.")
    if declared.isdigit() and int(declared) > limit:
        raise too_long
    data = bytearray()
    for chunk in response.iter_raw():
        data += chunk
        if len(data) > limit:
            raise too_long
    return bytes(data)


def read_head(response: httpx.Response, limit: int) -> bytes:
    """At most limit bytes of the body (an error's detail): the rest is never read."""
    data = bytearray()
    with contextlib.suppress(httpx.HTTPError):
        for chunk in response.iter_raw():
            data += chunk
            if len(data) >= limit:
                break
    return bytes(data[:limit])


def check_status(status: int, body: bytes, what: str) -> None:
    """PullError for an answer of 400 or more, with the start of its body."""
    if status >= 400:
        detail = body[:200].decode("utf-8", "replace").strip() or "no detail"
        raise PullError(f"The registry answered {status} for {what} ({detail}).")


def _size(count: int) -> str:
    return f"{count >> 20} MiB" if count >= 1 << 20 else f"{count >> 10} KiB"
