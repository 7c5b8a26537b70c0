"""Tiny Hugging Face models of each converted architecture, converted by us and run by us,
against transformers' own forward pass."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pyggml
from runner.batch import Batch
from runner.convert import CheckpointError, convert
from runner.executor import Executor
from runner.kvcache import CausalCache
from runner.loader import load_model

from ..corpus import corpus
from .hf_tiny import SPECIAL, checkpoint

KINDS = ["llama", "qwen2", "qwen3", "gemma3", "llama4"]
PROMPT = "The capital of France is Paris, and the capital of Spain is Madrid."
# f32 tolerance on the logits. ggml's CPU GELU reads a table of FP16 inputs (as llama.cpp's
# does, so Gemma 3 stays bit-identical with it): about 2e-3 of error per activation, which
# reaches the logits of the GELU-gated Gemma at about 1.6e-3
TOLERANCE = {"gemma3": 3e-3}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    cache = {}

    def get(kind, outtype="f32"):
        if kind not in cache:
            directory = tmp_path_factory.mktemp(kind)
            cache[kind] = {"hf": checkpoint(kind, directory / "hf")}
        if outtype not in cache[kind]:
            cache[kind][outtype] = convert(cache[kind]["hf"], cache[kind]["hf"].parent /
                                           f"{outtype}.gguf", outtype, progress=False)
        return cache[kind]

    return get


def reference(hf_dir, ids) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def executor(path, backend, cache_type="f32"):
    model = load_model(path, backend)
    kv = CausalCache(model.model.cache_layers(), 256, backend, cache_type, False)
    return model, Executor(model.model, kv, pyggml.Scheduler([backend]))


@pytest.mark.parametrize("kind", KINDS)
def test_full_prompt_logits_match_transformers(made, backend, kind):
    files = made(kind)
    model, run = executor(files["f32"], backend)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    expected = reference(files["hf"], ids)
    assert np.abs(ours - expected).max() < TOLERANCE.get(kind, 1e-3)
    half = made(kind, "f16")["f16"]
    model16, run16 = executor(half, backend, "f16")
    error16 = np.abs(run16.logits(Batch.of_sequence(ids, 0, all_logits=True)) - expected).max()
    assert error16 < 0.05, f"f16 weights and cache: max logit difference {error16:.4f}"


@pytest.mark.parametrize("kind", KINDS)
def test_decoding_step_by_step_matches(made, backend, kind):
    files = made(kind)
    model, run = executor(files["f32"], backend)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    expected = reference(files["hf"], ids)
    for position, token in enumerate(ids):
        step = run.logits(Batch.of_sequence([token], position))[-1]
        assert np.abs(step - expected[position]).max() < TOLERANCE.get(kind, 1e-3), position


@pytest.mark.parametrize("kind", KINDS)
def test_two_sequences_in_one_batch(made, backend, kind):
    files = made(kind)
    model, run = executor(files["f32"], backend)
    a = model.tokenizer.encode(PROMPT, add_special=True)
    b = model.tokenizer.encode("Once upon a time, in a land far away", add_special=True)
    batch = Batch(a + b, list(range(len(a))) + list(range(len(b))),
                  [0] * len(a) + [1] * len(b), outputs=range(len(a) + len(b)))
    ours, tolerance = run.logits(batch), TOLERANCE.get(kind, 1e-3)
    assert np.abs(ours[:len(a)] - reference(files["hf"], a)).max() < tolerance
    assert np.abs(ours[len(a):] - reference(files["hf"], b)).max() < tolerance


@pytest.mark.parametrize("kind", KINDS)
def test_tokenizer_ids_match_transformers(made, backend, kind):
    from transformers import AutoTokenizer

    files = made(kind)
    ours = load_model(files["f32"], backend).tokenizer
    theirs = AutoTokenizer.from_pretrained(files["hf"])
    for text in corpus(SPECIAL[kind]):
        assert ours.encode(text, add_special=False) == \
            theirs.encode(text, add_special_tokens=False), text
    assert ours.vocab.eos == theirs.eos_token_id


def test_unsupported_missing_and_mismatched_checkpoints(made, tmp_path):
    hf = made("llama")["hf"]
    with pytest.raises(CheckpointError, match="no config.json"):
        convert(tmp_path, tmp_path / "x.gguf", progress=False)
    bad = tmp_path / "bad"
    bad.mkdir()
    for file in hf.iterdir():
        (bad / file.name).symlink_to(file)
    (bad / "config.json").unlink()
    config = json.loads((hf / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps(dict(config, model_type="mamba")))
    with pytest.raises(CheckpointError, match="'mamba' is not supported; supported: llama"):
        convert(bad, tmp_path / "x.gguf", progress=False)
    (bad / "config.json").write_text(json.dumps(dict(config, intermediate_size=96)))
    with pytest.raises(CheckpointError, match="implies"):
        convert(bad, tmp_path / "x.gguf", progress=False)
    (bad / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        convert(bad, tmp_path / "x.gguf", progress=False)
    with pytest.raises(ValueError, match="Unknown output type"):
        convert(hf, tmp_path / "x.gguf", "q3", progress=False)


def test_a_sentencepiece_tokenizer_gives_sentencepieces_ids(tmp_path, backend):
    import sentencepiece

    from .hf_tiny import sentencepiece_checkpoint

    hf = sentencepiece_checkpoint(tmp_path)
    path = convert(hf, tmp_path / "spm.gguf", "f32", progress=False)
    ours = load_model(path, backend).tokenizer
    theirs = sentencepiece.SentencePieceProcessor(model_file=str(hf / "tokenizer.model"))
    assert ours.vocab.model == "llama" and ours.vocab.bos == 1 and ours.vocab.eos == 2
    for text in corpus([]):
        assert ours.encode(text, add_special=False) == theirs.encode(text), text
    assert ours.encode("Hi", add_special=True)[0] == 1
