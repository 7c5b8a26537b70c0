"""SentencePiece-style BPE (tokenizer.ggml.model = gemma4), as llama.cpp runs Gemma 4's.

Spaces become U+2581 and the text is split into runs of newlines and runs of anything
else; the merges then apply by rank over characters (not over bytes shown as characters,
as gpt2's do), and a character that no token holds falls back to its <0xNN> byte tokens.
Runs on the `tokenizers` library, like gpt2's.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

from .bpe import NEWLINE_RUNS, BPETokenizer
from .spm import SPACE, piece_bytes


class SentenceBPETokenizer(BPETokenizer):
    def _check(self) -> None:
        pass                                  # the pre-tokenizer is fixed

    def _model(self, ids, merges) -> models.BPE:
        return models.BPE(vocab=ids, merges=merges, byte_fallback=True)

    def _prepare(self, tokenizer: Tokenizer) -> None:
        tokenizer.normalizer = normalizers.Replace(" ", SPACE)
        tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(NEWLINE_RUNS), behavior="isolated")

    def _token_bytes(self) -> list[bytes]:
        return piece_bytes(self.vocab)
