"""A model's images: its projector and encoder, and prompts that hold images.

A prompt refers to its images with [img-N] tags (N: the image's index in a list, or its id in
a mapping), as Ollama's server writes them; a prompt given images but no tags has them at its
start, in order.
Each image becomes the projector's layout: its token texts before, one MediaRow per
embedding row, its token texts after.
"""

from __future__ import annotations

import re

from .encoder import Encoder
from .media import Media, digest_of
from .models.vision import images
from .tokenizer import Tokenizer

TAG = re.compile(r"\[img-(\d+)\]")


class Vision:
    def __init__(self, projector, encoder: Encoder, tokenizer: Tokenizer):
        self.projector, self.encoder, self.tokenizer = projector, encoder, tokenizer
        self._by_text: dict[str, int] = {}
        for i, text in enumerate(tokenizer.vocab.tokens):
            self._by_text.setdefault(text, i)
        layout = projector.layout
        self.before = [t for text in layout.before for t in self._ids(text)]
        self.after = [t for text in layout.after for t in self._ids(text)]

    def _ids(self, text: str) -> list[int]:
        """A layout text: the vocabulary's token of exactly that text, else its tokens."""
        if text in self._by_text:
            return [self._by_text[text]]
        if text.startswith("<") and text.endswith(">"):
            raise ValueError(f"The vocabulary has no {text} token, which this model's images "
                             "need: the model and the projector do not belong together.")
        return self.tokenizer.encode(text, add_special=False)

    def media(self, data: bytes) -> Media:
        """An image's bytes, decoded and preprocessed (ImageError for bytes that are not an
        image); encoded when a batch first needs it."""
        pixels = self.projector.preprocess(images.decode(data))
        digest = digest_of(bytes(data))
        return Media(digest, pixels, self.encoder.encode,
                     lambda d: self.encoder.cached(d) is not None)

    def prompt(self, text: str, data) -> list:
        """The items of a prompt with images (a list, or a mapping id -> bytes): token ids and
        media rows (BOS as the model asks, before everything)."""
        data = data if isinstance(data, dict) else dict(enumerate(data))
        found = [int(n) for n in TAG.findall(text)]
        if not found:
            text = "".join(f"[img-{n}]" for n in sorted(data)) + text
            found = sorted(data)
        for n in found:
            if n not in data:
                raise ValueError(f"The prompt refers to [img-{n}], but no image {n} came with "
                                 f"it ({len(data)} image(s) did).")
        missing = sorted(set(data) - set(found))
        if missing:
            raise ValueError(f"Image {missing[0]} came with the prompt, but the prompt has no "
                             f"[img-{missing[0]}] tag where it goes.")
        media = {n: self.media(image) for n, image in data.items()}
        parts = TAG.split(text)                  # text, n, text, n, ..., text
        items = self.tokenizer.encode(parts[0], add_special=True)
        for n, after in zip(parts[1::2], parts[2::2]):
            items += self.before + media[int(n)].items() + self.after
            items += self.tokenizer.encode(after, add_special=False)
        return items
