"""Embeddings of a tiny llama whose GGUF declares pooling, against the numpy forward pass."""

from __future__ import annotations

import queue

import numpy as np
import pytest

import runner
from runner.engine.loop import Engine
from runner.engine.pooling import pool, pooling_of
from runner.engine.request import Request

from tests.support.tiny import SHAPE, llama_tensors, reference_hidden, write_llama

KINDS = {1: "mean", 2: "cls", 3: "last"}


def embed(engine, tokens) -> dict:
    events = queue.Queue()
    engine.submit(Request(tokens, events.put))
    return events.get(timeout=60)


@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_pooled_embeddings_match_the_formulas(tmp_path, kind, flash):
    rng = np.random.default_rng(kind)
    tensors = llama_tensors(rng)
    path = write_llama(tmp_path / "embed.gguf", tensors, rope_base=500.0,
                       extra={"llama.pooling_type": kind})
    model = runner.load(path, num_ctx=64, parallel=2, flash_attn=flash)
    assert pooling_of(model.loaded.metadata) == KINDS[kind]
    engine = Engine(model.executor, model.tokenizer, parallel=2, batch_size=16,
                    pooling=KINDS[kind])
    engine.start()
    try:
        prompts = [rng.integers(0, SHAPE["vocab"], n).tolist() for n in (40, 7, 40)]
        prompts[2][:30] = prompts[0][:30]            # a shared prefix is not reused
        events = [embed(engine, p) for p in prompts]
    finally:
        engine.stop()
        model.close()
    for prompt, event in zip(prompts, events):
        expected = pool(reference_hidden(tensors, np.array(prompt), 500.0), KINDS[kind])
        got = np.array(event["embedding"])
        assert event["prompt_eval_count"] == len(prompt)
        np.testing.assert_allclose(got, expected, atol=5e-3 * np.abs(expected).max())
        cosine = got @ expected / np.linalg.norm(got) / np.linalg.norm(expected)
        assert cosine > 0.9999


def test_rank_pooling_is_refused():
    with pytest.raises(ValueError, match="Pooling type 4"):
        pooling_of({"general.architecture": "llama", "llama.pooling_type": 4})


@pytest.mark.parametrize("value", [[1, 2], "mean", 1.5])
def test_a_pooling_type_that_is_no_number_is_refused(value):
    """An array of them was a TypeError (unhashable) rather than the refusal."""
    with pytest.raises(ValueError, match="Pooling type .* is not supported"):
        pooling_of({"general.architecture": "bert", "bert.pooling_type": value})
