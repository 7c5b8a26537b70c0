"""bind_text_model: a file's text model bound to its tensors, or the documented refusal of a
file it cannot be (a ValueError whose message is a sentence). Every key of a tiny llama's
file, and the keys such a file may add, given each hostile value in turn: a wrong type, a
value out of any range, an array where one number belongs. (The fuzz target takes the same
step, tests/fuzz/gguf_reader.py.)"""

from __future__ import annotations

import math

import gguf
import numpy as np
import pytest

import pyggml
from pyggml.gguf_reader import Header
from runner.loading.loader import bind_text_model

from tests.support.gguf_edit import Typed, rewrite
from tests.support.tiny import llama_tensors, write_llama

T = gguf.GGUFValueType
HOSTILE = {
    "zero": Typed(0, T.UINT32), "minus one": Typed(-1, T.INT32),
    "2^32 - 1": Typed(2**32 - 1, T.UINT32), "2^64 - 1": Typed(2**64 - 1, T.UINT64),
    "NaN": Typed(math.nan, T.FLOAT32), "infinity": Typed(math.inf, T.FLOAT32),
    "minus one as a float": Typed(-1.0, T.FLOAT32), "a half": Typed(0.5, T.FLOAT64),
    "a string": Typed("x", T.STRING), "true": Typed(True, T.BOOL),
    "an array": Typed([1, 2], T.ARRAY, T.UINT32), "strings": Typed(["a"], T.ARRAY, T.STRING),
}
# the tiny file's own keys, then keys such a file may add
KEYS = ["llama.block_count", "llama.context_length", "llama.embedding_length",
        "llama.feed_forward_length", "llama.attention.head_count",
        "llama.attention.head_count_kv", "llama.attention.layer_norm_rms_epsilon",
        "llama.rope.freq_base", "tokenizer.ggml.model", "tokenizer.ggml.pre",
        "tokenizer.ggml.tokens"]
ADDED = ["llama.rope.dimension_count", "llama.attention.key_length", "llama.vocab_size",
         "llama.rope.dimension_sections", "llama.rope.scaling.type",
         "llama.rope.scaling.factor", "llama.rope.scaling.original_context_length",
         "llama.pooling_type", "general.alignment"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf",
                       llama_tensors(np.random.default_rng(0), 1))


def test_the_tiny_file_binds(tiny):
    assert [key for key in Header(tiny).metadata if key != "general.architecture"] == KEYS
    with pyggml.GGUFFile(tiny) as gguf_file:
        model, bound = bind_text_model(gguf_file)
    assert model.config.layers == 1 and "blk.0.attn_q.weight" in bound


@pytest.mark.parametrize("key", KEYS + ADDED)
def test_a_hostile_value_of_any_key_is_read_or_refused_with_a_sentence(tiny, tmp_path, key):
    for name, value in HOSTILE.items():
        path = rewrite(tiny, tmp_path / "hostile.gguf", values={key: value})
        try:
            with pyggml.GGUFFile(path) as gguf_file:
                bind_text_model(gguf_file)
        except ValueError as refused:
            assert str(refused).endswith("."), (name, refused)
