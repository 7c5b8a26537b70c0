"""Decode steps of several sequences attending in streams (CausalCache._streams, attend()),
on tiny models of the families that opt in: each sequence's row of a step of two is its
step alone, with flash attention and without. A family that does not opt in attends in one
range of cells and still computes."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.kvcache import CausalCache
from runner.kvcache.causal import evenly_spaced
from runner.loading.loader import load_model

# llama: the llama kin; gemma2: softcap; olmo3: sliding layers; gpt_oss: sinks; llama4:
# chunks and attention temperature; gemma4: row subsets (does not opt in)
KINDS = ["llama", "gemma2", "olmo3", "gpt_oss", "llama4", "gemma4"]
PROMPTS = [np.random.default_rng(seed).integers(5, 200, 20).tolist() for seed in (1, 2)]


@pytest.fixture(scope="module")
def backend():
    return pyggml.cpu_backend(threads=2)


@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_each_stream_computes_what_its_sequence_computes_alone(made, backend, kind, flash):
    model = load_model(made(kind)["f32"], backend).model
    kv = CausalCache(model.cache_layers(), 1024, backend, "f16" if flash else "f32", flash)
    kv.partition(2)                                         # home regions of 512 cells
    run = Executor(model, kv, pyggml.Scheduler([backend]))
    for seq, prompt in enumerate(PROMPTS):
        run.logits(Batch.of_sequence(prompt, 0, seq=seq))
    n = len(PROMPTS[0])
    both = run.logits(Batch([7, 9], [n, n], [0, 1], outputs=[0, 1]))
    assert kv.current.streams == (2 if model.attends_in_streams else 0)
    assert kv.current.seen(None) == ((0, 256) if model.attends_in_streams else (0, 768))
    if not model.attends_in_streams:
        assert np.isfinite(both).all()
        return
    for seq, token in enumerate((7, 9)):
        kv.remove(0, n)
        kv.remove(1, n)
        alone = run.logits(Batch([token], [n], [seq]))[0]
        # within the rounding of float32 products of 2 rows against 1, which an f16 cache
        # keeps (the real models' quantized products round alike: test_executor.py checks
        # those bit for bit); attending the wrong cells moves logits by their own size
        tolerance = (1e-3 if flash else 1e-5) * np.abs(alone).max()
        np.testing.assert_allclose(both[seq], alone, rtol=0, atol=tolerance)


@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("seqs,groups", [((0, 2), 1), ((1, 3), 1), ((0, 3), 1), ((0, 2, 4), 1),
                                         ((0, 1, 3), 2), ((0, 1, 3, 4), 2)])
def test_sequences_in_any_slots_attend_in_streams_a_group_of_evenly_spaced_ones_at_a_time(
        made, backend, seqs, groups, flash):
    """Slots 0 and 3 of 4 (a new request takes the least recently used slot) are two streams
    3 regions apart, each its own region's cells; slots 0, 1 and 3 attend in two groups
    (0 and 1; 3), each sequence still its own region."""
    model = load_model(made("llama")["f32"], backend).model
    kv = CausalCache(model.cache_layers(), 5 * 256, backend, "f16" if flash else "f32", flash)
    kv.partition(5)                                         # home regions of 256 cells
    run = Executor(model, kv, pyggml.Scheduler([backend]))
    prompts = {seq: np.random.default_rng(seq).integers(5, 200, 20).tolist() for seq in seqs}
    for seq, prompt in prompts.items():
        run.logits(Batch.of_sequence(prompt, 0, seq=seq))
    n, tokens = 20, [7 + seq for seq in seqs]
    together = run.logits(Batch(tokens, [n] * len(seqs), list(seqs),
                                outputs=list(range(len(seqs)))))
    assert (kv.current.streams, len(kv.current.groups)) == (len(seqs), groups)
    assert kv.current.seen(None) == (seqs[0] * 256, 256)
    for row, (seq, token) in enumerate(zip(seqs, tokens)):
        for other in seqs:
            kv.remove(other, n)
        alone = run.logits(Batch([token], [n], [seq]))[0]
        tolerance = (1e-3 if flash else 1e-5) * np.abs(alone).max()
        np.testing.assert_allclose(together[row], alone, rtol=0, atol=tolerance)


@pytest.mark.parametrize("ids,groups", [
    ([0, 1], ((0, 2, 1),)), ([0, 3], ((0, 2, 3),)), ([0, 1, 3], ((0, 2, 1), (3, 1, 1))),
    ([0, 2, 3, 4], ((0, 2, 2), (3, 2, 1))), ([1, 2, 4, 7, 8], ((1, 2, 1), (4, 2, 3), (8, 1, 1)))])
def test_increasing_ids_cut_into_runs_of_evenly_spaced_ones(ids, groups):
    assert evenly_spaced(ids) == groups
