"""A model's images and audio: its projectors and encoders, and prompts that hold them.

A prompt refers to its media with [img-N] tags (N: the item's index in a list, or its id in
a mapping), as Ollama's server writes them for images and audio alike; a prompt given media
but no tags has them at its start, in order. Bytes are told apart by content: a sound file
(WAV, FLAC, Ogg) is audio, anything else an image.
Each item becomes its projector's layout: its token texts before, one MediaRow per embedding
row, its token texts after (audio longer than 30 s: one such group per 30 s).
"""

from __future__ import annotations

import re

from . import sound
from ..models.vision import images
from ..tokenizer import Tokenizer
from .encoder import Encoder
from .media import Media, MediaRow, digest_of

TAG = re.compile(r"\[img-(\d+)\]")
NOUNS = {"image": "images", "audio": "audio"}


class Multimodal:
    def __init__(self, encoders: dict[str, Encoder], tokenizer: Tokenizer):
        self.encoders, self.tokenizer = encoders, tokenizer
        self._by_text: dict[str, int] = {}
        for i, text in enumerate(tokenizer.vocab.tokens):
            self._by_text.setdefault(text, i)
        self.before, self.after = {}, {}
        for modality, encoder in encoders.items():
            layout = encoder.projector.layout
            self.before[modality] = [t for text in layout.before for t in self._ids(text)]
            self.after[modality] = [t for text in layout.after for t in self._ids(text)]

    @property
    def max_rows(self) -> int:
        """The most rows one item can make (the batch must hold them)."""
        return max(encoder.projector.max_rows for encoder in self.encoders.values())

    def _ids(self, text: str) -> list[int]:
        """A layout text: the vocabulary's token of exactly that text, else its tokens."""
        if text in self._by_text:
            return [self._by_text[text]]
        if text.startswith("<") and text.endswith(">"):
            raise ValueError(f"The vocabulary has no {text} token, which this model's media "
                             "need: the model and the projector do not belong together.")
        return self.tokenizer.encode(text, add_special=False)

    def modality(self, data) -> str:
        modality = "audio" if sound.is_audio(data) else "image"
        if modality not in self.encoders:
            takes = " and ".join(NOUNS[m] for m in self.encoders)
            raise ValueError(f"This model's projector takes {takes}, not {NOUNS[modality]}.")
        return modality

    def media(self, data: bytes) -> list[Media]:
        """An item's bytes, decoded and preprocessed (ImageError or AudioError for bytes that
        are neither), as the pieces it is encoded in, each when a batch first needs it."""
        modality = self.modality(data)
        encoder = self.encoders[modality]
        if modality == "image":
            pieces = [encoder.projector.preprocess(images.decode(data))]
        else:
            pieces = [encoder.projector.preprocess(chunk)
                      for chunk in sound.chunks(sound.decode(data))]
        digest = digest_of(bytes(data))
        if len(pieces) > 1:                 # each chunk cached under its own key
            keys = [digest_of(digest + i.to_bytes(4, "little")) for i in range(len(pieces))]
        else:
            keys = [digest]

        def is_ready(d: bytes, e: Encoder = encoder) -> bool:
            return e.cached(d) is not None

        return [Media(key, pixels, encoder.encode, is_ready,
                      both_ways=encoder.projector.layout.bidirectional, modality=modality)
                for key, pixels in zip(keys, pieces)]

    def prompt(self, text: str, data) -> list:
        """The items of a prompt with media (a list, or a mapping id -> bytes): token ids and
        media rows (BOS as the model asks, before everything)."""
        data = data if isinstance(data, dict) else dict(enumerate(data))
        found = [int(n) for n in TAG.findall(text)]
        if not found:
            text = "".join(f"[img-{n}]" for n in sorted(data)) + text
            found = sorted(data)
        for n in found:
            if n not in data:
                raise ValueError(f"The prompt refers to [img-{n}], but no image {n} came with "
                                 f"it ({len(data)} image(s) or clip(s) did).")
        missing = sorted(set(data) - set(found))
        if missing:
            raise ValueError(f"Item {missing[0]} came with the prompt, but the prompt has no "
                             f"[img-{missing[0]}] tag where it goes.")
        media = {n: self.media(item) for n, item in data.items()}
        parts = TAG.split(text)                  # text, n, text, n, ..., text
        items: list[int | MediaRow] = []
        items += self.tokenizer.encode(parts[0], add_special=True)
        for tag, after in zip(parts[1::2], parts[2::2]):
            for piece in media[int(tag)]:
                items += self.before[piece.modality]
                items += piece.items()
                items += self.after[piece.modality]
            items += self.tokenizer.encode(after, add_special=False)
        return items
