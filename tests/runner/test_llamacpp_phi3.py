"""Phi-3's LongRoPE against llama.cpp itself (llama-cpp-python 0.3.36): in a context larger
than the original one, both rotate by the long factors from the first position, through a
prompt that crosses the original context and the decoding steps after it, bit for bit. (In a
context of 256, the short factors: test_llamacpp_parity.py's converted models.) A context
shift is left out: llama.cpp's re-rotation of the cached keys multiplies them by the
attention factor again (1.118 here, at every shift), where ours rotates them only, as for
YaRN (rope.py; test_phi3.py: shifted keys equal keys computed at their new positions).
Slow; skipped without llama-cpp-python."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.kvcache import new_cache

from tests.support.corpus import corpus
from tests.support.hf_tiny import PHI3_ROPE

pytestmark = pytest.mark.slow
llama_cpp = pytest.importorskip("llama_cpp")

CONTEXT = 2 * PHI3_ROPE["original_max_position_embeddings"]


def test_long_factors_in_a_long_context_equal_llama_cpps(tmp_path, backend):
    from runner.convert import convert
    from runner.loading.loader import load_model

    from tests.support.hf_tiny import checkpoint

    path = convert(checkpoint("phi3", tmp_path / "hf"), tmp_path / "f32.gguf", "f32",
                   progress=False)
    model = load_model(path, backend)
    assert model.model.config.uses_long_factors(CONTEXT)
    llm = llama_cpp.Llama(model_path=str(path), verbose=False, n_threads=2, n_ctx=CONTEXT,
                          logits_all=True, flash_attn=False, type_k=0, type_v=0)
    ids: list[int] = []
    for text in corpus([]):
        ids += model.tokenizer.encode(text + " ", add_special=False)
        if len(ids) > CONTEXT // 2 + 20:
            break
    llm.eval(ids)
    kv = new_cache(model.model.cache_layers(), CONTEXT, backend, "f32", False)
    executor = Executor(model.model, kv, pyggml.Scheduler([backend]))
    ours = executor.logits(Batch.of_sequence(ids, 0, all_logits=True))
    np.testing.assert_array_equal(ours, np.array(llm.scores[:len(ids)], dtype=np.float32))
    position = len(ids)
    for step in range(4):
        token = int(ours[-1].argmax())
        ours = executor.logits(Batch.of_sequence([token], position))
        llm.eval([token])
        np.testing.assert_array_equal(ours[-1], np.asarray(llm.scores[llm.n_tokens - 1],
                                                           dtype=np.float32), f"step {step}")
        position += 1
