"""Unigram (sentencepiece) vocabularies trained here on the corpus, and tiny GGUFs holding one."""

from __future__ import annotations

import gguf
import numpy as np

from tests.support.corpus import corpus
from tests.support.tiny import llama_tensors, write_llama

USER_DEFINED = "<|im_end|>"
# NFKC folds (full-width letters, ligatures, circled digits), space runs and tabs, text
# the vocabulary cannot spell (unknown characters, merged into one unknown token)
HARD = ["ＡＢＣ full width", "ﬁnance ① ㈱", "  leading and trailing  ", "a\t\tb\n\nc",
        "emoji 🦙🦙 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𐀀𐀁", "Ünïcödé ñ e\u0301", "", " ", "x"]


def protobuf_field(message: bytes, number: int) -> bytes:
    """The first length-delimited field `number` of a protobuf message."""
    def varint(at: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = message[at]
            value |= (byte & 0x7F) << shift
            at, shift = at + 1, shift + 7
            if byte < 0x80:
                return value, at
    at = 0
    while at < len(message):
        key, at = varint(at)
        kind = key & 7
        if kind == 0:
            _, at = varint(at)
        elif kind == 1:
            at += 8
        elif kind == 5:
            at += 4
        else:
            size, at = varint(at)
            if key >> 3 == number:
                return message[at:at + size]
            at += size
    return b""


def train_unigram(directory, normalization: str = "nmt_nfkc",
                  remove_extra_whitespaces: bool = True):
    """A Unigram sentencepiece model trained offline on the corpus, ids laid out as
    XLM-RoBERTa's (<s> <pad> </s> <unk> first): (processor, token types, charsmap)."""
    import sentencepiece

    directory.mkdir(parents=True, exist_ok=True)
    prefix = directory / "unigram"
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus([]) * 2), model_prefix=str(prefix), vocab_size=800,
        model_type="unigram", character_coverage=0.9995, normalization_rule_name=normalization,
        remove_extra_whitespaces=remove_extra_whitespaces, hard_vocab_limit=False,
        bos_id=0, pad_id=1, eos_id=2, unk_id=3, user_defined_symbols=[USER_DEFINED],
        minloglevel=2)
    processor = sentencepiece.SentencePieceProcessor(model_file=f"{prefix}.model")
    size = processor.vocab_size()
    types = [gguf.TokenType.UNKNOWN if processor.is_unknown(i) else
             gguf.TokenType.CONTROL if processor.is_control(i) else
             gguf.TokenType.USER_DEFINED if processor.id_to_piece(i) == USER_DEFINED else
             gguf.TokenType.NORMAL for i in range(size)]
    spec = protobuf_field(processor.serialized_model_proto(), 3)   # normalizer_spec
    return processor, types, protobuf_field(spec, 2)               # precompiled_charsmap


def unigram_gguf(directory, normalization: str, remove_extra_whitespaces: bool):
    """That vocabulary in a tiny llama GGUF as llama.cpp's converter writes XLM-RoBERTa's
    (tokenizer.ggml.model t5)."""
    processor, types, charsmap = train_unigram(directory, normalization,
                                               remove_extra_whitespaces)
    size = processor.vocab_size()
    tensors = llama_tensors(np.random.default_rng(0), layers=1)
    tensors["token_embd.weight"] = np.zeros((size, 32), np.float32)
    tensors["output.weight"] = np.zeros((size, 32), np.float32)
    path = write_llama(directory / "unigram.gguf", tensors, tokenizer=dict(
        model="t5", tokens=[processor.id_to_piece(i) for i in range(size)], types=types,
        charsmap=charsmap, unk=3, eos=2, scores=[processor.get_score(i) for i in range(size)],
        space_prefix=True, remove_extra_whitespaces=remove_extra_whitespaces))
    return path, processor


SETTINGS = {"nfkc": ("nmt_nfkc", True), "identity": ("identity", False)}
