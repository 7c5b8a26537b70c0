"""Tiny Nomic BERTs (nomic-embed-text's architecture, and v2-moe's with experts and
XLM-RoBERTa's Unigram tokenizer) saved as Nomic's own checkpoints are (their config.json
and tensor names), converted and embedded, against a torch reference written here from
Nomic's modeling code (transformers has no Nomic BERT: the released models run as remote
code): rotary (rotate-half) attention over a fused QKV, post-LayerNorm blocks, SwiGLU as
fc11 * silu(fc12) or GELU, experts chosen by a softmax router's top k (megablocks' stacked
weights), mean pooling."""

from __future__ import annotations

import json

import numpy as np
import pytest

import runner
from runner.convert import CheckpointError, convert
from runner.models import model_class

from tests.support.architectures import NOMIC_ARCHITECTURE, NOMIC_MOE_ARCHITECTURE
from tests.support.hf_embedding import NOMIC_MOE_CONFIG, NOMIC_TEXTS, nomic_checkpoint
from tests.support.parity import table_gelu


def reference(directory, text: str, gelu=None) -> np.ndarray:
    """The mean-pooled last hidden states, computed in torch from the checkpoint; gelu in
    place of the exact one."""
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

    def linear(x, name):
        bias = w.get(f"{name}.bias")
        return x @ w[f"{name}.weight"].T + (0 if bias is None else bias)

    gelu = gelu or torch.nn.functional.gelu

    def mlp(x, p, i):
        if config["activation_function"] == "swiglu":
            up, gate = linear(x, p + "mlp.fc11"), linear(x, p + "mlp.fc12")
            return linear(up * torch.nn.functional.silu(gate), p + "mlp.fc2")
        if i % config.get("moe_every_n_layers", 0) != 1:
            return linear(gelu(linear(x, p + "mlp.fc1")), p + "mlp.fc2")
        experts, f = config["num_experts"], config["n_inner"]
        weights = linear(x, p + "mlp.router.layer").softmax(-1)             # (T, X)
        top, chosen = weights.topk(config["moe_top_k"], -1)                 # (T, K)
        w1 = w[p + "mlp.experts.mlp.w1"].view(experts, f, e)
        w2 = w[p + "mlp.experts.mlp.w2"].view(experts, f, e)
        out = torch.zeros_like(x)
        for t in range(n):
            for weight, expert in zip(top[t], chosen[t]):
                hidden = gelu(x[t] @ w1[expert].T)
                out[t] += weight * (hidden @ w2[expert])
        return out + w[p + "mlp.experts.bias"]

    with torch.no_grad():
        x = w["embeddings.word_embeddings.weight"][ids] + \
            w["embeddings.token_type_embeddings.weight"][0]
        x = layer_norm(x, "emb_ln")
        for i in range(config["n_layer"]):
            p = f"encoder.layers.{i}."
            q, k, v = linear(x, p + "attn.Wqkv").split(e, -1)
            q, k, v = (t.reshape(n, heads, d).transpose(0, 1) for t in (q, k, v))
            scores = rotate(q) @ rotate(k).transpose(1, 2) / d ** 0.5
            attended = (scores.softmax(-1) @ v).transpose(0, 1).reshape(n, e)
            x = layer_norm(x + linear(attended, p + "attn.out_proj"), p + "norm1")
            x = layer_norm(x + mlp(x, p, i), p + "norm2")
    return x.mean(0).numpy()


@pytest.mark.parametrize("change, architecture", [({}, NOMIC_ARCHITECTURE),
                                                  (NOMIC_MOE_CONFIG, NOMIC_MOE_ARCHITECTURE)])
def test_nomic_embeddings_match_the_reference(tmp_path, change, architecture):
    directory = nomic_checkpoint(tmp_path / "nomic", **change)
    path = convert(directory, tmp_path / "nomic.gguf", "f32", progress=False)
    model = runner.load(path, num_ctx=128, parallel=2, batch_size=64, flash_attn=False)
    try:
        assert type(model.loaded.model) is model_class(architecture)
        for text in NOMIC_TEXTS:
            got = np.array(model.embed(text))
            if architecture == NOMIC_ARCHITECTURE:
                np.testing.assert_allclose(got, reference(directory, text), rtol=0, atol=1e-4)
                continue
            # GELU as llama.cpp computes it (ggml's FP16 table), as test_bert.py explains
            np.testing.assert_allclose(got, reference(directory, text, table_gelu()),
                                       rtol=0, atol=1e-4)
            expected = reference(directory, text)
            assert got @ expected / np.linalg.norm(got) / np.linalg.norm(expected) > 0.9999
            np.testing.assert_allclose(got, expected, rtol=0, atol=3e-3)
    finally:
        model.close()


@pytest.mark.parametrize("change, words", [
    ({"qkv_proj_bias": True}, "qkv_proj_bias"),
    ({"rotary_emb_interleaved": True}, "rotary_emb_interleaved"),
    ({"prenorm": True}, "prenorm"),
    ({**NOMIC_MOE_CONFIG, "moe_normalize_expert_weights": True}, "moe_normalize_expert_weights"),
    ({**NOMIC_MOE_CONFIG, "activation_function": "swiglu"}, "activation_function"),
    ({"n_positions": 4096}, "n_positions"),
])
def test_nomic_checkpoints_llama_cpp_cannot_run_are_refused(tmp_path, change, words):
    directory = nomic_checkpoint(tmp_path / "nomic", **change)
    with pytest.raises(CheckpointError, match=words):
        convert(directory, tmp_path / "out.gguf", "f32", progress=False)
