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

from tests.support.tiny import SHAPE, llama_tensors, reference_logits, write_llama


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
