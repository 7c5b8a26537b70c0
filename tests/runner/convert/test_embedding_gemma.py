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

from .gguf_edit import rewrite
from .hf_tiny import SHAPE, pooling_modules, tokenizer
from .parity import table_gelu

ARCHITECTURE = "gemma-embedding"   # what the tiny checkpoint converts to (test_registry.py)
OLLAMA_ARCHITECTURE = "gemma3_embed"   # the class that reads Ollama's layout of the same file
# a prompt long enough that the window (8 in the file: 4 positions either side) matters
TEXTS = ["The capital of France is Paris, and the capital of Spain is Madrid; the capital "
         "of Italy is Rome.", "Hello, world! How are you today?"]
DENSE = {"2_Dense": (64, 96), "3_Dense": (96, 64)}


def embedding_gemma_checkpoint(directory, seed: int = 0, dense=DENSE, **change):
    import torch
    from safetensors.torch import save_file
    from transformers import Gemma3TextConfig, Gemma3TextModel

    tok = tokenizer("gemma3")
    torch.manual_seed(seed)
    config = Gemma3TextConfig(**{**SHAPE, "vocab_size": len(tok), "head_dim": 16,
                                 "query_pre_attn_scalar": 16, "num_hidden_layers": 6,
                                 "sliding_window": 8, "use_bidirectional_attention": True,
                                 "bos_token_id": tok.bos_token_id,
                                 "eos_token_id": tok.eos_token_id, **change})
    model = Gemma3TextModel(config).eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("norm.weight"):
                value.copy_(0.3 * torch.randn_like(value))     # Gemma's norms: 1 + weight
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    pooling_modules(directory, "mean", config.hidden_size)
    modules = json.loads((directory / "modules.json").read_text())
    for index, (folder, (size_in, size_out)) in enumerate(dense.items(), start=2):
        (directory / folder).mkdir()
        (directory / folder / "config.json").write_text(json.dumps({
            "in_features": size_in, "out_features": size_out, "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity"}))
        save_file({"linear.weight": torch.randn(size_out, size_in) * 0.1},
                  directory / folder / "model.safetensors")
        modules.append({"idx": index, "name": str(index), "path": folder,
                        "type": "sentence_transformers.models.Dense"})
    (directory / "modules.json").write_text(json.dumps(modules))
    return directory


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
        for folder in DENSE:
            vector = load_file(directory / folder / "model.safetensors")["linear.weight"] @ vector
    return vector.numpy()


def test_embedding_gemma_matches_sentence_transformers_pipeline(tmp_path):
    directory = embedding_gemma_checkpoint(tmp_path / "hf")
    path = convert(directory, tmp_path / "emb.gguf", "f32", progress=False)
    model = runner.load(path, num_ctx=256, parallel=2, batch_size=128, flash_attn=False)
    try:
        assert type(model.loaded.model) is model_class(ARCHITECTURE)
        for text in TEXTS:
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
    keys = {name: None if ".dense_" in name else name.replace(f"{ARCHITECTURE}.", "gemma3.")
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
                OLLAMA_ARCHITECTURE if layout == "ollama" else ARCHITECTURE)
            assert len(model.loaded.model.dense) == 2
            vectors[layout] = [np.array(model.embed(text)) for text in TEXTS]
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
