"""Images and audio in the input stream.

A prompt is a list of items, one per position: a token id (int), or a MediaRow, one row of
an image's embedding. The rows of one image stand together (a run) and always go into one
batch, so the image's rows can attend to each other; truncation, context shifts and the
prompt cache never cut inside a run. A MediaRow equals another of the same image (its
bytes' hash) and row, so the prompt cache matches a cached image by content.

The embedding is computed when a batch first needs it (Media.embedding), by the encoder,
which keeps it by hash for later turns.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..models.vision import Pixels

MEDIA_TOKEN = 0          # the token id a media row's position holds (its embedding replaces it)


def digest_of(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


@dataclass(eq=False)
class Media:
    """One image (or audio clip) of a prompt: its hash and pixels; its rows once encoded."""
    digest: bytes
    pixels: Pixels
    encode: Callable[[bytes, Pixels], np.ndarray]    # the encoder's (cached) encode
    is_ready: Callable[[bytes], bool]
    both_ways: bool = True       # its rows may attend to each other (as its projector's
                                 # layout says; on the layers the model says)
    modality: str = "image"

    @property
    def rows(self) -> int:
        return self.pixels.rows

    @property
    def ready(self) -> bool:
        """Encoded already: embedding() computes nothing."""
        return self.is_ready(self.digest)

    def embedding(self) -> np.ndarray:
        """float32 (rows, text embd)."""
        return self.encode(self.digest, self.pixels)

    def items(self) -> list["MediaRow"]:
        return [MediaRow(self.digest, i, self) for i in range(self.rows)]


@dataclass(frozen=True)
class MediaRow:
    digest: bytes
    index: int
    media: Media = field(compare=False, repr=False)


def attach_media(batch, items: list, block_ids) -> None:
    """Give batch (of items) its media rows' embeddings, and each image's rows a block id
    from block_ids (an iterator), which lets them see each other where the model says (audio
    rows stay causal)."""
    found = runs(items)
    if not found:
        return
    for start, end, media in found:
        if media.both_ways:
            batch.blocks[start:end] = next(block_ids)
    batch.media_rows = np.concatenate([np.arange(start, end, dtype=np.int32)
                                       for start, end, _ in found])
    batch.media = np.concatenate([media.embedding()[items[start].index:
                                                    items[start].index + end - start]
                                  for start, end, media in found])


def token_ids(items) -> np.ndarray:
    """int32 ids of items, MEDIA_TOKEN where a media row stands, 0 for a placeholder (a
    negative id: a token not sampled yet)."""
    return np.fromiter((MEDIA_TOKEN if isinstance(t, MediaRow) else max(t, 0) for t in items),
                       dtype=np.int32, count=len(items))


def run_start(items, index: int) -> int:
    """index, or where the media run that index falls inside begins (a cut at index would
    split that image)."""
    while 0 < index < len(items) and _same_run(items[index - 1], items[index]):
        index -= 1
    return index


def run_end(items, index: int) -> int:
    """index, or where the media run that index falls inside ends."""
    while 0 < index < len(items) and _same_run(items[index - 1], items[index]):
        index += 1
    return index


def _same_run(before, after) -> bool:
    return isinstance(before, MediaRow) and isinstance(after, MediaRow) and \
        before.digest == after.digest and after.index == before.index + 1


def runs(items) -> list[tuple[int, int, Media]]:
    """(start, end, media) of each media run in items."""
    found: list[tuple[int, int, Media]] = []
    for i, item in enumerate(items):
        if not isinstance(item, MediaRow):
            continue
        if i and _same_run(items[i - 1], item):
            found[-1] = (found[-1][0], i + 1, found[-1][2])
        else:
            found.append((i, i + 1, item.media))
    return found


def largest_run(items) -> int:
    return max((end - start for start, end, _ in runs(items)), default=0)
