"""Tokenizers built from GGUF metadata alone.

    tok = from_metadata(gguf_metadata)
    ids = tok.encode("Hello", add_special=True)    # BOS/EOS as the file asks
    tok.decode(ids)

encode(text, add_special, parse_special): add_special adds BOS/EOS as the metadata says
(pass it only for the first piece of a prompt tokenized in pieces); parse_special
recognises control tokens written in the text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .bpe import BPETokenizer
from .sentence_bpe import SentenceBPETokenizer
from .spm import SPMTokenizer
from .stream import TextStream
from .unigram import UnigramTokenizer
from .vocab import TokenType, Vocab
from .wpm import WPMTokenizer


class Backend(Protocol):
    """What every tokenizer in BACKENDS gives: each token's bytes, and text to ids."""
    token_bytes: list[bytes]

    def encode(self, text: str, parse_special: bool = True) -> list[int]: ...


BACKENDS: dict[str, Callable[[Vocab], Backend]] = {
    "gpt2": BPETokenizer, "llama": SPMTokenizer, "bert": WPMTokenizer,
    "gemma4": SentenceBPETokenizer, "t5": UnigramTokenizer}

__all__ = ["Tokenizer", "TextStream", "TokenType", "Vocab", "from_metadata"]


class Tokenizer:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self._backend = BACKENDS[vocab.model](vocab)
        self.token_bytes: list[bytes] = self._backend.token_bytes

    @property
    def size(self) -> int:
        return len(self.vocab.tokens)

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True
               ) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"Text to tokenize must be a str, not {type(text).__name__}.")
        ids = self._backend.encode(text, parse_special) if text else []
        if add_special and self.vocab.add_bos and self.vocab.bos is not None:
            ids.insert(0, self.vocab.bos)
        if add_special and self.vocab.add_eos and self.vocab.eos is not None:
            ids.append(self.vocab.eos)
        return ids

    def decode(self, ids) -> str:
        return b"".join(self.piece(i) for i in ids).decode("utf-8", errors="replace")

    def piece(self, token: int) -> bytes:
        if not 0 <= token < self.size:
            raise ValueError(f"Token id {token} is outside the vocabulary (0..{self.size - 1}).")
        return self.token_bytes[token]

    def is_special(self, token: int) -> bool:
        """Whether token is a control or added token (a chat template's markers)."""
        types = self.vocab.types
        return 0 <= token < len(types) and types[token] in (TokenType.CONTROL,
                                                            TokenType.USER_DEFINED)

    def is_eog(self, token: int) -> bool:
        return token in self.vocab.eog


def from_metadata(meta: dict) -> Tokenizer:
    """Vocab.from_metadata refuses a tokenizer.ggml.model with no backend here."""
    return Tokenizer(Vocab.from_metadata(meta))
