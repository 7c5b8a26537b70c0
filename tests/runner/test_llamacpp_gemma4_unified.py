"""Gemma 4 12B ("unified") against llama.cpp itself (llama-cpp-python 0.3.36): our
converter's file (its logits: test_llamacpp_parity.py's converted models) holds the
suppressed tokens llama.cpp reads, ids beyond the vocabulary dropped by both, and greedy
decoding skips them alike. llama-cpp-python's Llama does not apply the vocabulary's list
(llama.cpp's common sampler does): the ids go to it as logit biases of -inf, as that
sampler adds them. Slow; skipped without llama-cpp-python."""

from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

from runner.engine.batch import Batch
from runner.sample import Sampler, SamplingOptions

from tests.support.parity import PROMPT, executor

pytestmark = pytest.mark.slow
llama_cpp = pytest.importorskip("llama_cpp")

STEPS = 8


def test_suppressed_tokens_are_read_and_skipped_as_llama_cpp_does(tmp_path, backend):
    from runner.convert import convert

    from tests.support.hf_tiny import checkpoint

    hf = checkpoint("gemma4_unified", tmp_path / "hf")
    model, run = executor(convert(hf, tmp_path / "f32.gguf", "f32", progress=False), backend)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    top = int(run.logits(Batch.of_sequence(ids, 0))[-1].argmax())   # the first pick, unmasked
    generation = json.loads((hf / "generation_config.json").read_text())
    generation["suppress_tokens"] += [top, 10**6]                    # and one past the vocab
    (hf / "generation_config.json").write_text(json.dumps(generation))
    path = convert(hf, tmp_path / "s.gguf", "f32", progress=False)
    model, run = executor(path, backend)
    llm = llama_cpp.Llama(model_path=str(path), verbose=False, n_threads=2, n_ctx=256,
                          flash_attn=False, type_k=0, type_v=0)
    count = ctypes.c_int32()
    found = llama_cpp.llama_vocab_get_suppress_tokens(llm._model.vocab, ctypes.byref(count))
    theirs_suppressed = sorted(found[i] for i in range(count.value))
    assert tuple(theirs_suppressed) == model.tokenizer.vocab.suppressed == \
        tuple(sorted({1, top}))

    def masked(_, scores):
        scores = np.copy(scores)
        scores[theirs_suppressed] += -np.inf
        return scores

    theirs = []
    for token in llm.generate(ids, temp=0.0, repeat_penalty=1.0,
                              logits_processor=llama_cpp.LogitsProcessorList([masked])):
        theirs.append(int(token))
        if len(theirs) == STEPS:
            break
    sampler = Sampler(SamplingOptions(temperature=0), model.tokenizer.vocab.suppressed)
    logits, ours = run.logits(Batch.of_sequence(ids, 0))[-1], []
    for position in range(len(ids), len(ids) + len(theirs)):
        ours.append(sampler.sample(logits))
        logits = run.logits(Batch.of_sequence(ours[-1:], position))[-1]
    assert len(theirs) == STEPS and ours == theirs and top not in ours
