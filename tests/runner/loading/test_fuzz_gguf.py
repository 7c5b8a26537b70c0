"""The GGUF reader and the text model's metadata checks under coverage-guided fuzzing
(tests/fuzz/gguf_reader.py) for a minute, from a real tiny model's bytes: every input must
end in the documented refusal (a ValueError with a sentence) or a bound model, within the
harness's time and memory bounds."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.fuzzing import fuzz
from tests.support.gguf_edit import rewrite
from tests.support.tiny import llama_tensors, write_llama

SECONDS = 60


@pytest.mark.slow
def test_the_gguf_reader_refuses_what_it_cannot_read(tmp_path):
    plain = write_llama(tmp_path / "plain.gguf", llama_tensors(np.random.default_rng(0), 1))
    # the same with the keys a llama file may add: each a value for the fuzzer to break
    scaled = rewrite(plain, tmp_path / "scaled.gguf", values={
        "llama.rope.dimension_count": 8, "llama.attention.key_length": 8,
        "llama.vocab_size": 64, "llama.rope.scaling.type": "yarn",
        "llama.rope.scaling.factor": 4.0, "llama.rope.scaling.original_context_length": 64,
        "general.alignment": 32})
    fuzz("gguf_reader", SECONDS, [plain.read_bytes(), scaled.read_bytes()], tmp_path / "fuzz")
