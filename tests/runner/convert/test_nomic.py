"""A tiny Nomic BERT (nomic-embed-text's architecture) saved as Nomic's own checkpoints are
(their config.json and tensor names), converted and embedded, against a torch reference
written here from Nomic's modeling code (transformers has no Nomic BERT: the released
model runs as remote code): rotary (rotate-half) attention over a fused QKV, post-LayerNorm
blocks, SwiGLU as fc11 * silu(fc12), mean pooling."""

from __future__ import annotations

import json

import numpy as np
import pytest

import runner
from runner.convert import CheckpointError, convert
from runner.models import model_class

from .hf_tiny import pooling_modules, wordpiece_tokenizer

ARCHITECTURE = "nomic-bert"    # what the tiny checkpoint converts to (see test_registry.py)
TEXTS = ["search_query: The capital of France is Paris.", "Hello, world! How are you today?",
         "search_document: Numbers like 1234 and symbols #@! too."]
CONFIG = dict(model_type="nomic_bert", architectures=["NomicBertModel"], n_embd=64, n_head=4,
              n_layer=2, n_inner=96, n_positions=8192, layer_norm_epsilon=1e-12,
              rotary_emb_base=1000, rotary_emb_fraction=1.0, rotary_emb_interleaved=False,
              rotary_emb_scale_base=None, activation_function="swiglu", qkv_proj_bias=False,
              mlp_fc1_bias=False, mlp_fc2_bias=False, prenorm=False, causal=False,
              type_vocab_size=2)


def nomic_checkpoint(directory, seed: int = 0, **change):
    """Random weights under Nomic's names, its config.json, a WordPiece tokenizer."""
    from safetensors.numpy import save_file

    vocab = wordpiece_tokenizer(directory)
    config = dict(CONFIG, vocab_size=vocab, **change)
    rng = np.random.default_rng(seed)
    e, f = config["n_embd"], config["n_inner"]

    def weights(*shape):
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    def norm(prefix):
        return {f"{prefix}.weight": (1 + weights(e)), f"{prefix}.bias": weights(e)}

    tensors = {"embeddings.word_embeddings.weight": weights(vocab, e),
               "embeddings.token_type_embeddings.weight": weights(2, e), **norm("emb_ln")}
    for i in range(config["n_layer"]):
        p = f"encoder.layers.{i}."
        tensors.update({p + "attn.Wqkv.weight": weights(3 * e, e),
                        p + "attn.out_proj.weight": weights(e, e),
                        p + "mlp.fc11.weight": weights(f, e), p + "mlp.fc12.weight": weights(f, e),
                        p + "mlp.fc2.weight": weights(e, f), **norm(p + "norm1"),
                        **norm(p + "norm2")})
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(config))
    pooling_modules(directory, "mean", e)
    return directory


def reference(directory, text: str) -> np.ndarray:
    """The mean-pooled last hidden states, computed in torch from the checkpoint."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    config = json.loads((directory / "config.json").read_text())
    w = load_file(directory / "model.safetensors")
    ids = AutoTokenizer.from_pretrained(directory)(text, return_tensors="pt")["input_ids"][0]
    e, heads, eps = config["n_embd"], config["n_head"], config["layer_norm_epsilon"]
    d, n = e // heads, len(ids)

    def layer_norm(x, prefix):
        return torch.nn.functional.layer_norm(x, (e,), w[f"{prefix}.weight"],
                                              w[f"{prefix}.bias"], eps)

    inv_freq = 1.0 / config["rotary_emb_base"] ** (torch.arange(0, d, 2).float() / d)
    angles = torch.arange(n).float()[:, None] * inv_freq[None]           # (T, D/2)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)

    def rotate(x):                                                       # (H, T, D)
        half = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
        return x * cos + half * sin

    with torch.no_grad():
        x = w["embeddings.word_embeddings.weight"][ids] + \
            w["embeddings.token_type_embeddings.weight"][0]
        x = layer_norm(x, "emb_ln")
        for i in range(config["n_layer"]):
            p = f"encoder.layers.{i}."
            q, k, v = (x @ w[p + "attn.Wqkv.weight"].T).split(e, -1)
            q, k, v = (t.reshape(n, heads, d).transpose(0, 1) for t in (q, k, v))
            scores = rotate(q) @ rotate(k).transpose(1, 2) / d ** 0.5
            attended = (scores.softmax(-1) @ v).transpose(0, 1).reshape(n, e)
            x = layer_norm(x + attended @ w[p + "attn.out_proj.weight"].T, p + "norm1")
            up, gate = x @ w[p + "mlp.fc11.weight"].T, x @ w[p + "mlp.fc12.weight"].T
            mlp = (up * torch.nn.functional.silu(gate)) @ w[p + "mlp.fc2.weight"].T
            x = layer_norm(x + mlp, p + "norm2")
    return x.mean(0).numpy()


def test_nomic_embeddings_match_the_reference(tmp_path):
    directory = nomic_checkpoint(tmp_path / "nomic")
    path = convert(directory, tmp_path / "nomic.gguf", "f32", progress=False)
    model = runner.load(path, num_ctx=128, parallel=2, batch_size=64)
    try:
        assert type(model.loaded.model) is model_class(ARCHITECTURE)
        for text in TEXTS:
            np.testing.assert_allclose(np.array(model.embed(text)), reference(directory, text),
                                       rtol=0, atol=1e-4)
    finally:
        model.close()


@pytest.mark.parametrize("change, words", [
    ({"qkv_proj_bias": True}, "qkv_proj_bias"),
    ({"rotary_emb_interleaved": True}, "rotary_emb_interleaved"),
    ({"prenorm": True}, "prenorm"),
    ({"moe_every_n_layers": 2, "num_experts": 8}, "experts"),
])
def test_nomic_checkpoints_llama_cpp_cannot_run_are_refused(tmp_path, change, words):
    directory = nomic_checkpoint(tmp_path / "nomic", **change)
    with pytest.raises(CheckpointError, match=words):
        convert(directory, tmp_path / "out.gguf", "f32", progress=False)
