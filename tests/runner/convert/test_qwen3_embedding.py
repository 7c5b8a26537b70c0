"""Qwen3-Embedding: a Qwen 3 decoder whose sentence-transformers Pooling module takes the
last token. Converted, it declares last-token pooling and embeds as transformers' last
hidden state at the last token, and as llama.cpp embeds the same file (slow suite)."""

from __future__ import annotations

import json

import numpy as np

import runner
from runner.convert import convert
from runner.engine.pooling import pooling_of
from runner.models import model_class
from pyggml.gguf_reader import Header

from .hf_tiny import checkpoint

TEXTS = ["The capital of France is Paris.", "Hello, world! How are you today?",
         "Numbers like 1234 and symbols #@! too."]


def embedding_checkpoint(directory):
    """A tiny Qwen 3 with the modules.json and Pooling config Qwen3-Embedding ships."""
    checkpoint("qwen3", directory)
    (directory / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"}]))
    (directory / "1_Pooling").mkdir()
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 64, "pooling_mode_lasttoken": True}))
    return directory


def reference(directory, text: str) -> np.ndarray:
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModel.from_pretrained(directory, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0, -1].numpy()


def test_last_token_embeddings_match_transformers(tmp_path):
    directory = embedding_checkpoint(tmp_path / "hf")
    path = convert(directory, tmp_path / "emb.gguf", "f32", progress=False)
    assert pooling_of(Header(path).metadata) == "last"
    model = runner.load(path, num_ctx=128, batch_size=64, flash_attn=False)
    try:
        assert type(model.loaded.model) is model_class("qwen3")
        for text in TEXTS:
            np.testing.assert_allclose(np.array(model.embed(text)), reference(directory, text),
                                       rtol=0, atol=1e-4)
    finally:
        model.close()
