"""A tiny EmbeddingGemma (transformers' Gemma3TextModel with bidirectional attention, and
sentence-transformers' mean pooling and two Dense layers), converted and embedded, against
transformers' last hidden state pooled and projected as sentence-transformers does."""

from __future__ import annotations

import json

import numpy as np
import pytest

import runner
from runner.convert import CheckpointError, convert
from runner.models import model_class

from tests.support.architectures import (EMBEDDING_GEMMA_ARCHITECTURE,
                                         EMBEDDING_GEMMA_OLLAMA_ARCHITECTURE)
from tests.support.gguf_edit import rewrite
from tests.support.hf_embedding import (EMBEDDING_GEMMA_DENSE, EMBEDDING_GEMMA_TEXTS,
                                        embedding_gemma_checkpoint)
from tests.support.parity import table_gelu


def reference(directory, text: str) -> np.ndarray:
    """transformers' last hidden state (its GELU rounded as ggml's table rounds it), mean
    pooled, through the Dense layers."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(directory, dtype=torch.float32).eval()
    for layer in model.layers:
        layer.mlp.act_fn = table_gelu()
    ids = AutoTokenizer.from_pretrained(directory)(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        vector = model(ids).last_hidden_state[0].mean(0)
        for folder in EMBEDDING_GEMMA_DENSE:
            vector = load_file(directory / folder / "model.safetensors")["linear.weight"] @ vector
    return vector.numpy()


def test_embedding_gemma_matches_sentence_transformers_pipeline(tmp_path):
    directory = embedding_gemma_checkpoint(tmp_path / "hf")
    path = convert(directory, tmp_path / "emb.gguf", "f32", progress=False)
    model = runner.load(path, num_ctx=256, parallel=2, batch_size=128, flash_attn=False)
    try:
        assert type(model.loaded.model) is model_class(EMBEDDING_GEMMA_ARCHITECTURE)
        for text in EMBEDDING_GEMMA_TEXTS:
            got = np.array(model.embed(text))
            assert len(model.tokenizer.encode(text, add_special=True)) > 2 * 8   # windows bite
            # (read as a causal window, looking back only, the vectors differ everywhere)
            np.testing.assert_allclose(got, reference(directory, text), rtol=0, atol=1e-4)
    finally:
        model.close()


def ollama_layout(source, target):
    """source (our gemma-embedding GGUF) as Ollama's embeddinggemma files are:
    general.architecture gemma3 with a pooling type, keys under gemma3., the Dense layers
    named dense.0 and dense.1."""
    from pyggml.gguf_reader import Header

    renamed = {"dense_2.weight": "dense.0.weight", "dense_3.weight": "dense.1.weight"}
    keys = {name: None if ".dense_" in name
            else name.replace(f"{EMBEDDING_GEMMA_ARCHITECTURE}.", "gemma3.")
            for name in Header(source).metadata}
    return rewrite(source, target, keys=keys, arch="gemma3",
                   tensors=lambda name, array, _: {renamed.get(name, name): array})


def test_ollamas_layout_embeds_alike(tmp_path):
    """Ollama's files say gemma3 with a pooling type: they are read as EmbeddingGemma (the
    encoder, its Dense layers under Ollama's names), not as the causal Gemma 3."""
    directory = embedding_gemma_checkpoint(tmp_path / "hf")
    ours = convert(directory, tmp_path / "emb.gguf", "f32", progress=False)
    vectors = {}
    for layout, path in (("llama.cpp", ours), ("ollama", ollama_layout(ours, tmp_path / "o.gguf"))):
        model = runner.load(path, num_ctx=256, batch_size=128)
        try:
            assert type(model.loaded.model) is model_class(
                EMBEDDING_GEMMA_OLLAMA_ARCHITECTURE if layout == "ollama"
                else EMBEDDING_GEMMA_ARCHITECTURE)
            assert len(model.loaded.model.dense) == 2
            vectors[layout] = [np.array(model.embed(text)) for text in EMBEDDING_GEMMA_TEXTS]
        finally:
            model.close()
    np.testing.assert_array_equal(vectors["llama.cpp"], vectors["ollama"])


@pytest.mark.parametrize("change, words", [
    ({"bias": True}, "bias"),
    ({"activation_function": "torch.nn.modules.activation.Tanh"}, "activation"),
])
def test_dense_layers_llama_cpp_cannot_run_are_refused(tmp_path, change, words):
    directory = embedding_gemma_checkpoint(tmp_path / "hf")
    dense = directory / "2_Dense" / "config.json"
    dense.write_text(json.dumps({**json.loads(dense.read_text()), **change}))
    with pytest.raises(CheckpointError, match=words):
        convert(directory, tmp_path / "out.gguf", "f32", progress=False)
