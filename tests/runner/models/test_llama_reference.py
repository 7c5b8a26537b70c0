"""llama against a numpy forward pass written from the formulas (RMSNorm, GQA attention
with interleaved-pair RoPE as llama.cpp's converter lays Q/K out, Llama 3 frequency
factors, SwiGLU), on tiny random F32 weights."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.kvcache import CausalCache
from runner.loading.loader import load_model

from ..tiny import SHAPE, llama_tensors, write_llama


def rms_norm(x, w, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, pos, base, factors=None):
    """x (T, H, D): rotate pairs (2i, 2i+1) by pos * base^(-2i/D) / factor_i."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2) / d)
    if factors is not None:
        inv = inv / factors
    angle = pos[:, None, None] * inv[None, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * np.cos(angle) - b * np.sin(angle)
    out[..., 1::2] = a * np.sin(angle) + b * np.cos(angle)
    return out


def reference_logits(t, ids, base, factors=None):
    return reference_hidden(t, ids, base, factors) @ t["output.weight"].T


def reference_hidden(t, ids, base, factors=None):
    """(T, E) final hidden states after the output norm."""
    e, h, kvh = SHAPE["embd"], SHAPE["heads"], SHAPE["kv_heads"]
    d, n = e // h, len(ids)
    pos = np.arange(n, dtype=np.float64)
    x = t["token_embd.weight"][ids].astype(np.float64)
    causal = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(SHAPE["layers"]):
        p = lambda name, i=i: t[f"blk.{i}.{name}.weight"].astype(np.float64)
        hn = rms_norm(x, p("attn_norm"))
        q = rope((hn @ p("attn_q").T).reshape(n, h, d), pos, base, factors)
        k = rope((hn @ p("attn_k").T).reshape(n, kvh, d), pos, base, factors)
        v = (hn @ p("attn_v").T).reshape(n, kvh, d)
        k, v = np.repeat(k, h // kvh, axis=1), np.repeat(v, h // kvh, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d) + causal
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", probs, v).reshape(n, e)
        x = x + attn @ p("attn_output").T
        hn = rms_norm(x, p("ffn_norm"))
        gate = hn @ p("ffn_gate").T
        x = x + ((gate / (1 + np.exp(-gate))) * (hn @ p("ffn_up").T)) @ p("ffn_down").T
    return rms_norm(x, t["output_norm.weight"])


@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("rope_scaling", [False, True])
def test_llama_matches_the_formulas(tmp_path, backend, flash, rope_scaling):
    rng = np.random.default_rng(0)
    tensors = llama_tensors(rng)
    factors = None
    if rope_scaling:                           # Llama 3 style: low frequencies slowed down
        factors = np.linspace(1.0, 8.0, (SHAPE["embd"] // SHAPE["heads"]) // 2).astype(np.float32)
        tensors["rope_freqs.weight"] = factors
    model = load_model(write_llama(tmp_path / "tiny.gguf", tensors, rope_base=500.0), backend)
    ids = rng.integers(0, SHAPE["vocab"], 40)
    kv = CausalCache(model.model.cache_layers(), 64, backend, "f16", flash)
    ours = Executor(model.model, kv, pyggml.Scheduler([backend])).logits(
        Batch.of_sequence(ids, 0, all_logits=True))
    expected = reference_logits(tensors, ids, 500.0, factors)
    # K and V are cached in F16: about 1e-3 relative
    np.testing.assert_allclose(ours, expected, atol=5e-3 * np.abs(expected).max(), rtol=0)
    if rope_scaling:
        without = reference_logits(tensors, ids, 500.0)
        assert np.abs(without - expected).max() > 10 * np.abs(ours - expected).max()
