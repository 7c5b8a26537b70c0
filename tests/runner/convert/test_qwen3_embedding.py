"""Qwen3-Embedding: a Qwen 3 decoder whose sentence-transformers Pooling module takes the
last token. Converted, it declares last-token pooling and embeds as transformers' last
hidden state at the last token, and as llama.cpp embeds the same file (slow suite)."""

from __future__ import annotations


import numpy as np

import runner
from runner.convert import convert
from runner.engine.pooling import pooling_of
from runner.models import model_class
from pyggml.gguf_reader import Header

from tests.support.hf_embedding import QWEN3_EMBEDDING_TEXTS, qwen3_embedding_checkpoint


def reference(directory, text: str) -> np.ndarray:
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModel.from_pretrained(directory, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0, -1].numpy()


def test_last_token_embeddings_match_transformers(tmp_path):
    directory = qwen3_embedding_checkpoint(tmp_path / "hf")
    path = convert(directory, tmp_path / "emb.gguf", "f32", progress=False)
    assert pooling_of(Header(path).metadata) == "last"
    model = runner.load(path, num_ctx=128, batch_size=64, flash_attn=False)
    try:
        assert type(model.loaded.model) is model_class("qwen3")
        for text in QWEN3_EMBEDDING_TEXTS:
            np.testing.assert_allclose(np.array(model.embed(text)), reference(directory, text),
                                       rtol=0, atol=1e-4)
    finally:
        model.close()
