"""Text fed to a streaming parser in pieces, every way it could arrive."""

from __future__ import annotations


def run(extractor, pieces):
    content, thinking, calls = "", "", []
    for piece in pieces:
        c, t, k = extractor.push(piece)
        content, thinking, calls = content + c, thinking + t, calls + k
    c, t, k = extractor.finish()
    return content + c, thinking + t, calls + k


def split_everywhere(text):
    """Every way of cutting text in two, and one character at a time."""
    yield [text]
    yield list(text)
    for cut in range(1, len(text)):
        yield [text[:cut], text[cut:]]
