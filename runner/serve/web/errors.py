"""The one error a request is refused with: an HTTP status, a sentence, and (for OpenAI's
shape) an optional code. Every API renders it in its own error body."""

from __future__ import annotations


class ServeError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.code = status, code
