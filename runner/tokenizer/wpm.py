"""WordPiece (tokenizer.ggml.model = bert) on the `tokenizers` library.

llama.cpp's converter stores BERT's vocabulary with a phantom space: a word-initial piece
"x" as "▁x", a continuation "##x" as "x", bracketed special tokens as they are. We turn it
back into the WordPiece vocabulary and tokenize as BERT does: clean, lowercase, split on
whitespace and punctuation, then the longest pieces first.
"""

from __future__ import annotations

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

from .vocab import TokenType, Vocab

PHANTOM = "\u2581"


def original_piece(text: str, kind: int) -> str:
    if kind in (TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.UNKNOWN) or \
            (text.startswith("[") and text.endswith("]")):
        return text
    return text[1:] if text.startswith(PHANTOM) else "##" + text


class WPMTokenizer:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        pieces = [original_piece(t, k) for t, k in zip(vocab.tokens, vocab.types)]
        ids: dict[str, int] = {}
        for i, piece in enumerate(pieces):
            ids.setdefault(piece, i)
        unk = pieces[vocab.unk] if vocab.unk is not None else "[UNK]"
        self._plain = self._build(ids, unk, ())
        self._special = self._build(ids, unk, [
            AddedToken(vocab.tokens[i], normalized=False, special=True)
            for i in vocab.ids_of_type(TokenType.CONTROL, TokenType.USER_DEFINED)])
        self.token_bytes = [
            text.encode() if kind in (TokenType.CONTROL, TokenType.USER_DEFINED)
            else (" " + text[1:] if text.startswith(PHANTOM) else text).encode()
            for text, kind in zip(vocab.tokens, vocab.types)]

    @staticmethod
    def _build(ids: dict, unk: str, special) -> Tokenizer:
        tokenizer = Tokenizer(models.WordPiece(ids, unk_token=unk,
                                               continuing_subword_prefix="##"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        tokenizer.add_special_tokens(list(special))
        return tokenizer

    def encode(self, text: str, parse_special: bool = True) -> list[int]:
        tokenizer = self._special if parse_special else self._plain
        return tokenizer.encode(text, add_special_tokens=False).ids
