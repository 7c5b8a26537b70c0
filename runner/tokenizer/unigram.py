"""Unigram tokenizer (tokenizer.ggml.model = t5), as llama.cpp runs it: T5, XLM-RoBERTa and
the models built on it (nomic-embed-text-v2-moe, bge-m3, jina-embeddings-v3).

The text is first normalized as SentencePiece does: the longest prefix that the file's
precompiled character map (tokenizer.ggml.precompiled_charsmap, an XOR-compressed double
array) knows is replaced, spaces become U+2581, runs of them merge when the file says so
(tokenizer.ggml.remove_extra_whitespaces) and one goes before the text
(tokenizer.ggml.add_space_prefix). Then the segmentation with the highest sum of token
scores wins (Viterbi); a character no token starts with becomes the unknown token, scored
10 below the lowest score, and runs of unknown tokens fold into one. User-defined tokens
are kept whole by the normalizer and score 0. The pieces and scores need no merge list, so
the `tokenizers` library's Unigram model would fit, but its normalizer walks graphemes
where llama.cpp walks bytes; this follows llama.cpp.
"""

from __future__ import annotations

import struct

from .spm import SPACE, piece_bytes
from .vocab import TokenType, Vocab

UNKNOWN_PENALTY = 10.0
MATCHED = (TokenType.NORMAL, TokenType.USER_DEFINED, TokenType.UNUSED)


class CharsMap:
    """SentencePiece's precompiled normalization map: a trie over UTF-8 bytes whose leaves
    point into a table of NUL-terminated replacement strings."""

    def __init__(self, blob: bytes):
        if len(blob) < 4:
            raise ValueError("tokenizer.ggml.precompiled_charsmap is too short to hold its "
                             "header.")
        size = struct.unpack_from("<I", blob)[0]
        if size % 4 or 4 + size >= len(blob):
            raise ValueError("tokenizer.ggml.precompiled_charsmap's trie runs past its end.")
        self.nodes = struct.unpack_from(f"<{size // 4}I", blob, 4)
        self.replacements = blob[4 + size:]

    def _node(self, index: int) -> int:
        if index >= len(self.nodes):
            raise ValueError("tokenizer.ggml.precompiled_charsmap points outside its trie.")
        return self.nodes[index]

    @staticmethod
    def _base(node: int) -> int:
        return (node >> 10) << ((node & (1 << 9)) >> 6)

    def longest(self, data: bytes, start: int) -> tuple[int, bytes]:
        """(bytes matched at start, their replacement); (0, b"") when nothing matches."""
        index = self._base(self._node(0))
        length, value = 0, 0
        for offset in range(start, len(data)):
            byte = data[offset]
            if byte == 0:
                break
            index ^= byte
            node = self._node(index)
            if node & ((1 << 31) | 0xFF) != byte:
                break
            index ^= self._base(node)
            if (node >> 8) & 1:                       # a leaf: its value is an offset
                length = offset - start + 1
                value = self._node(index) & ((1 << 31) - 1)
        if not length:
            return 0, b""
        end = self.replacements.find(b"\0", value)
        if value >= len(self.replacements) or end < 0:
            raise ValueError("tokenizer.ggml.precompiled_charsmap has a replacement outside "
                             "its table.")
        return length, self.replacements[value:end]


class UnigramTokenizer:
    def __init__(self, vocab: Vocab):
        if vocab.scores is None:
            raise ValueError("A Unigram vocabulary needs tokenizer.ggml.scores.")
        if vocab.unk is None:
            raise ValueError("A Unigram vocabulary needs tokenizer.ggml.unknown_token_id.")
        self.vocab = vocab
        self.charsmap = CharsMap(bytes(vocab.charsmap)) if vocab.charsmap else None
        self.pieces: dict[str, tuple[int, float]] = {}
        for i, (text, kind) in enumerate(zip(vocab.tokens, vocab.types)):
            if kind in MATCHED and text:
                score = 0.0 if kind == TokenType.USER_DEFINED else float(vocab.scores[i])
                self.pieces.setdefault(text, (i, score))
        self.longest_piece = max(map(len, self.pieces), default=1)
        normal = [vocab.scores[i] for i in vocab.ids_of_type(TokenType.NORMAL)]
        self.unknown_score = (min(normal) if normal else 0.0) - UNKNOWN_PENALTY
        # special tokens written in the text are split out when asked; otherwise the
        # normalizer keeps user-defined ones whole (llama.cpp, as sentencepiece)
        self._special = vocab.splitter(TokenType.CONTROL, TokenType.UNKNOWN,
                                       TokenType.USER_DEFINED)
        self.user_defined = sorted((vocab.tokens[i].encode() for i in
                                    vocab.ids_of_type(TokenType.USER_DEFINED)
                                    if vocab.tokens[i]), key=len, reverse=True)
        self.ids: dict[str, int] = {}
        for i, text in enumerate(vocab.tokens):
            self.ids.setdefault(text, i)
        self.token_bytes = piece_bytes(vocab)

    def encode(self, text: str, parse_special: bool = True) -> list[int]:
        pieces = self._special.split(text) if parse_special and self._special else [text]
        ids = []
        for index, piece in enumerate(pieces):
            if index % 2 == 1:                         # a special token matched by the split
                ids.append(self.ids[piece])
            elif piece:
                ids.extend(self._viterbi(self.normalize(piece)))
        return ids

    def normalize(self, text: str) -> str:
        data, out = text.encode(), bytearray()
        space = SPACE.encode()
        merge = self.vocab.remove_extra_whitespaces
        prefix_pending, in_word = self.vocab.add_space_prefix, False
        offset = 0
        while offset < len(data):
            replacement, consumed = self._normalize_prefix(data, offset)
            for byte in replacement:
                if byte != 0x20:
                    if not in_word:
                        in_word = True
                        if prefix_pending or merge:
                            out += space
                            prefix_pending = False
                    out.append(byte)
                else:
                    in_word = False
                    if not merge:
                        out += space
            offset += consumed
        return out.decode("utf-8", errors="replace")

    def _normalize_prefix(self, data: bytes, offset: int) -> tuple[bytes, int]:
        for token in self.user_defined:
            if data.startswith(token, offset):
                return token, len(token)
        if self.charsmap is not None:
            length, replacement = self.charsmap.longest(data, offset)
            if length:
                return replacement, length
        length = utf8_length(data[offset])
        return data[offset:offset + length], length

    def _viterbi(self, text: str) -> list[int]:
        if not text:
            return []
        unk = self.vocab.unk
        assert unk is not None                        # __init__ refuses a vocabulary without one
        n = len(text)
        best = [(-float("inf"), -1, 0)] * (n + 1)     # (score, token, start) ending here
        best[0] = (0.0, -1, 0)
        for start in range(n):
            score = best[start][0]
            single = False
            for end in range(start + 1, min(n, start + self.longest_piece) + 1):
                found = self.pieces.get(text[start:end])
                if found is None:
                    continue
                single |= end == start + 1
                challenger = score + found[1]
                if challenger > best[end][0]:
                    best[end] = (challenger, found[0], start)
            if not single and score + self.unknown_score > best[start + 1][0]:
                best[start + 1] = (score + self.unknown_score, unk, start)
        ids: list[int] = []
        end = n
        while end > 0:
            _, token, start = best[end]
            if not (ids and token == unk and ids[-1] == unk):
                ids.append(token)
            end = start
        return ids[::-1]


def utf8_length(first_byte: int) -> int:
    return 1 if first_byte < 0x80 else 2 if first_byte < 0xE0 else \
        3 if first_byte < 0xF0 else 4
