"""/embedding on a runner serving a tiny llama whose GGUF declares mean pooling."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.runner_process import RunnerProcess
from tests.support.tiny import llama_tensors, reference_hidden, write_llama


@pytest.fixture(scope="module")
def embedder(workdir):
    tensors = llama_tensors(np.random.default_rng(3))
    path = write_llama(workdir / "embed.gguf", tensors, rope_base=500.0,
                       extra={"llama.pooling_type": 1})
    runner = RunnerProcess(path, workdir, "--parallel", "2", "--ctx-size", "128")
    runner.wait_status(0)
    yield runner, tensors
    runner.stop()


def test_embedding_matches_the_formulas(embedder):
    runner, tensors = embedder
    text = "ABCDEFGH" * 4
    tokens = runner.client.post("/tokenize", json={"content": text,
                                                   "add_special": True}).json()["tokens"]
    body = runner.client.post("/embedding", json={"content": text}).json()
    expected = reference_hidden(tensors, np.array(tokens), 500.0).mean(0)
    got = np.array(body["embedding"])
    assert body["prompt_eval_count"] == len(tokens)
    assert got @ expected / np.linalg.norm(got) / np.linalg.norm(expected) > 0.9999
    again = runner.client.post("/embedding", json={"content": text}).json()
    assert again["prompt_eval_count"] == len(tokens)          # no prompt cache


def test_an_embedding_model_does_not_generate(embedder):
    runner, _ = embedder
    response = runner.client.post("/completion", json={"Prompt": "ABC"})
    assert response.status_code == 501 and "cannot generate" in response.json()["error"]
    too_long = runner.client.post("/embedding", json={"content": "A" * 200})
    assert too_long.status_code == 400 and "holds at most 64" in too_long.json()["error"]
    assert runner.client.post("/embedding", json={"content": ""}).status_code == 400
    assert runner.health()["status"] == 0
