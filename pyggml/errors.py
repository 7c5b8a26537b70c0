"""The one error path: a failed ggml call becomes a GGMLError carrying ggml's own text.
GGMLError itself needs no library (a process that only catches it loads none)."""

from __future__ import annotations

import os


class GGMLError(RuntimeError):
    """ggml refused an operation or could not complete it (shapes, memory, compute)."""


def ggml_message() -> str:
    """Take the message of the last failed guarded call on this thread ('' if none)."""
    from ._lib import ffi, lib       # there is a failure: the library is loaded already

    message = lib.pyggml_take_error()
    return "" if message == ffi.NULL else ffi.string(message).decode(errors="replace")


def ensure(result, what: str, detail: str = ""):
    """Return result, or raise GGMLError when it is NULL/0 (a failed guarded call)."""
    if result:
        return result
    raise GGMLError(failure_text(what, detail))


def failure_text(what: str, detail: str = "") -> str:
    reason = ggml_message()
    text = f"{what} failed"
    if detail:
        text += f" ({detail})"
    if reason:
        where, _, message = reason.strip().partition(" ")
        text += f": {os.path.basename(where)} {message}" if where.endswith(":") else f": {reason}"
    return text + "."
