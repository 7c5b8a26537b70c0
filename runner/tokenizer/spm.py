"""SentencePiece-style tokenizer (tokenizer.ggml.model = llama), as llama.cpp runs it.

Spaces become U+2581; the text is split into characters, then the adjacent pair whose
concatenation is a token with the highest score is merged, repeatedly (leftmost first on
ties). A piece that is not a token falls back to its <0xNN> byte tokens. Special tokens
written in the text are split out first. The vocabulary has scores but no merge list, so
`tokenizers` cannot run it directly.
"""

from __future__ import annotations

import heapq

from .vocab import TokenType, Vocab

SPACE = "\u2581"


def piece_bytes(vocab: Vocab) -> list[bytes]:
    """Each token's bytes: <0xNN> byte tokens their byte, the others their text with U+2581
    as a space."""
    return [bytes([int(text[3:5], 16)]) if kind == TokenType.BYTE
            else text.replace(SPACE, " ").encode()
            for text, kind in zip(vocab.tokens, vocab.types)]


class SPMTokenizer:
    def __init__(self, vocab: Vocab):
        if vocab.scores is None:
            raise ValueError("A SentencePiece vocabulary needs tokenizer.ggml.scores.")
        self.vocab = vocab
        self.ids = {text: i for i, text in enumerate(vocab.tokens)}
        self.scores = vocab.scores
        self.byte_ids = {}
        for i, kind in enumerate(vocab.types):
            if kind == TokenType.BYTE:
                self.byte_ids[int(vocab.tokens[i][3:5], 16)] = i
        self._special = vocab.splitter(TokenType.CONTROL, TokenType.USER_DEFINED)
        self._plain = vocab.splitter(TokenType.USER_DEFINED)
        self.token_bytes = piece_bytes(vocab)

    def encode(self, text: str, parse_special: bool = True) -> list[int]:
        splitter = self._special if parse_special else self._plain
        pieces = splitter.split(text) if splitter else [text]
        ids, first = [], True
        for index, piece in enumerate(pieces):
            if not piece:
                continue
            if index % 2 == 1:                         # a special token matched by the split
                ids.append(self.ids[piece])
                continue
            if first and self.vocab.add_space_prefix:
                piece = " " + piece
            first = False
            ids.extend(self._encode_text(piece.replace(" ", SPACE)))
        return ids

    def _encode_text(self, text: str) -> list[int]:
        symbols = list(text)
        if not symbols:
            return []
        prev = list(range(-1, len(symbols) - 1))
        nxt = list(range(1, len(symbols) + 1))
        nxt[-1] = -1
        alive = [True] * len(symbols)
        heap: list[tuple[float, int, str]] = []

        def push(left: int) -> None:
            right = nxt[left]
            if right == -1:
                return
            joined = symbols[left] + symbols[right]
            token = self.ids.get(joined)
            if token is not None:
                heapq.heappush(heap, (-self.scores[token], left, joined))

        for i in range(len(symbols) - 1):
            push(i)
        while heap:
            _, left, joined = heapq.heappop(heap)
            right = nxt[left]
            if not alive[left] or right == -1 or symbols[left] + symbols[right] != joined:
                continue                               # stale: a side was merged already
            symbols[left] = joined
            alive[right] = False
            nxt[left] = nxt[right]
            if nxt[right] != -1:
                prev[nxt[right]] = left
            if prev[left] != -1:
                push(prev[left])
            push(left)
        ids = []
        i = 0
        while i != -1:
            token = self.ids.get(symbols[i])
            if token is not None:
                ids.append(token)
            else:
                ids.extend(self.byte_ids[b] for b in symbols[i].encode())
            i = nxt[i]
        return ids
