"""Streaming detokenization that never emits half a UTF-8 character."""

from __future__ import annotations


class TextStream:
    """Feed token bytes, get text; bytes of an unfinished UTF-8 character wait."""

    def __init__(self):
        self._pending = b""

    def push(self, data: bytes) -> str:
        data = self._pending + data
        cut = _complete_prefix(data)
        self._pending = data[cut:]
        return data[:cut].decode("utf-8", errors="replace")

    def flush(self) -> str:
        """What is left at the end (an incomplete character becomes U+FFFD)."""
        rest, self._pending = self._pending, b""
        return rest.decode("utf-8", errors="replace")


def _complete_prefix(data: bytes) -> int:
    """Length of the longest prefix that does not end inside a UTF-8 character."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        byte = data[n - back]
        if byte & 0xC0 != 0x80:                 # a lead byte (or ASCII)
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else \
                3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
            return n if back >= need else n - back
    return n
