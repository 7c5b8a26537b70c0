"""Caches that hold only their window (kvcache/cells.py) against the whole cache, on tiny
models of every family with sliding or chunked layers (windows of 8; batches of 16, so a
window pool has 256 cells and prompts of 600 tokens wrap it twice).

While a window pool has not wrapped, each sequence's cells sit where the whole cache puts
them and the logits are bit-identical. Once it wraps, a sliding layer's attention visits
the same keys and values in another order (the ring's), as llama.cpp's SWA cache does, so
its sums round differently: the logits then agree within float rounding (measured below
1e-4 of their scale in f32; f16 caches and flash attention accumulate in f16 and move more),
never bit for bit. The prompt-cache rule and the memory figures are at the end."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
import runner
from runner.api import LoadOptions, footprint_of
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.kvcache import CausalCache
from runner.loading.loader import load_model, open_model

from tests.support.hf_tiny import checkpoint

KINDS = ["gemma3", "gemma2", "olmo3", "gpt_oss", "llama4", "gemma4", "gemma3n"]
BATCH = 16
CELLS = 1024
PROMPT = np.random.default_rng(0).integers(5, 200, 600).tolist()


@pytest.fixture(scope="module")
def backend():
    return pyggml.cpu_backend(threads=2)


def executor(path, backend, windowed: bool, flash=False, cache_type="f32"):
    model = load_model(path, backend)
    kv = CausalCache(model.model.cache_layers(), CELLS, backend, cache_type, flash,
                     window_cells=(2, BATCH) if windowed else None)
    return Executor(model.model, kv, pyggml.Scheduler([backend]))


def prompt_logits(run, ids, start=0, seq=0):
    """Logits (T, vocab) of ids evaluated in batches of BATCH from position start."""
    return np.concatenate([run.logits(Batch.of_sequence(ids[i:i + BATCH], start + i, seq=seq,
                                                        all_logits=True))
                           for i in range(0, len(ids), BATCH)])


def wraps_at(run) -> int:
    """The first position whose batch reuses a window pool's cell (one sequence)."""
    return min(pool.size for window, pool in run.kv.pools.items() if window is not None)


def compare(whole, windowed, wrap, tolerance):
    scale = np.abs(whole).max()
    assert np.array_equal(whole[:wrap], windowed[:wrap])
    assert np.abs(whole - windowed).max() < tolerance * scale


@pytest.mark.parametrize("kind", KINDS)
def test_window_cache_logits_equal_the_whole_caches(made, backend, kind):
    path = made(kind)["f32"]
    whole, windowed = executor(path, backend, False), executor(path, backend, True)
    assert len(windowed.kv.pools) == 2 and len(whole.kv.pools) == 1
    wrap = wraps_at(windowed)
    compare(prompt_logits(whole, PROMPT), prompt_logits(windowed, PROMPT), wrap, 1e-4)


@pytest.fixture(scope="module")
def gemma3_64(tmp_path_factory):
    """Gemma 3 with heads of 64 (quantized caches need whole blocks, and rotate by 64)."""
    from runner.convert import convert

    directory = tmp_path_factory.mktemp("gemma3_64")
    hf = checkpoint("gemma3", directory / "hf", head_dim=64, query_pre_attn_scalar=64)
    return convert(hf, directory / "f32.gguf", "f32", progress=False)


@pytest.mark.parametrize("flash,cache_type,tolerance", [(False, "f16", 1e-3),
                                                        (True, "f16", 1e-2),
                                                        (True, "q8_0", 1e-2)])
def test_flash_attention_and_quantized_window_caches(gemma3_64, backend, flash, cache_type,
                                                     tolerance):
    whole = executor(gemma3_64, backend, False, flash, cache_type)
    windowed = executor(gemma3_64, backend, True, flash, cache_type)
    compare(prompt_logits(whole, PROMPT), prompt_logits(windowed, PROMPT),
            wraps_at(windowed), tolerance)


def forked_and_shifted(run):
    """Sequence 0 reads the prompt; sequence 1 forks its first 580 positions and goes on
    with other tokens while 0 goes on too, both in each batch; then 0 drops 200 positions
    after its first 4 (a context shift) and reads 40 more. The logits of every step."""
    out = [prompt_logits(run, PROMPT)]
    run.kv.copy_prefix(0, 1, 580)
    other = PROMPT[::-1]
    for step in range(40):
        batch = Batch(np.array([PROMPT[step], other[step]]), np.array([600 + step, 580 + step]),
                      np.array([0, 1]), outputs=[0, 1])
        out.append(run.logits(batch))
    run.kv.remove(0, 4, 204)
    run.shift(0, 204, 640, -200)
    out.append(prompt_logits(run, PROMPT[:40], start=440))
    return np.concatenate(out)


@pytest.mark.parametrize("kind", ["gemma3", "gpt_oss"])
def test_forks_and_shifts_keep_window_caches_equal(made, backend, kind):
    path = made(kind)["f32"]
    whole, windowed = executor(path, backend, False), executor(path, backend, True)
    compare(forked_and_shifted(whole), forked_and_shifted(windowed), wraps_at(windowed), 1e-4)


@pytest.fixture(scope="module")
def long_gemma3(tmp_path_factory):
    """The tiny Gemma 3 trained for 2048 positions (the cache holds at most those)."""
    from runner.convert import convert

    directory = tmp_path_factory.mktemp("gemma3_long")
    hf = checkpoint("gemma3", directory / "hf", max_position_embeddings=2048)
    return convert(hf, directory / "f32.gguf", "f32", progress=False)


@pytest.fixture(scope="module")
def sliding_model(long_gemma3):
    path = long_gemma3
    models = {}

    def get(swa_full: bool):
        if swa_full not in models:
            models[swa_full] = runner.load(path, num_ctx=CELLS, batch_size=BATCH, threads=2,
                                           swa_full=swa_full)
        return models[swa_full]

    yield get
    for model in models.values():
        model.close()


def evaluated(model, ids) -> int:
    """How many of ids' tokens a greedy request evaluated (the rest came from the cache)."""
    list(model._pieces(list(ids), *runner.api.split_options(dict(temperature=0,
                                                                 num_predict=2)), None))
    return model.last.prompt_eval_count - model.last.prompt_cached_count


@pytest.mark.parametrize("swa_full", [False, True])
def test_a_prefix_resumes_while_the_window_before_it_is_held(sliding_model, swa_full):
    """The window pool holds the last ~250 positions: a prefix ending among them resumes; one
    ending further back is evaluated again from the start, unless the whole cache is kept."""
    model = sliding_model(swa_full)
    assert evaluated(model, PROMPT) == len(PROMPT)
    near = PROMPT[:590] + [7, 8, 9]
    assert evaluated(model, near) == 3
    far = PROMPT[:300] + [7, 8, 9]
    assert evaluated(model, far) == (len(far) if not swa_full else 3)


def test_a_fork_is_made_only_from_a_slot_that_can_resume(long_gemma3):
    """--multiuser-cache: a prompt sharing a prefix that a slot's window still covers is
    forked from it (cells shared in every pool); one sharing only a prefix the windows
    gave up is evaluated whole."""
    model = runner.load(long_gemma3, num_ctx=CELLS, parallel=2, batch_size=BATCH, threads=2,
                        multiuser_cache=True)
    try:
        assert evaluated(model, PROMPT) == len(PROMPT)
        assert evaluated(model, PROMPT[:590] + [7, 8, 9]) == 3
        first, second = model.engine.cache.slots
        for pool in model.kv.pools.values():
            shared = pool.cells(first.id, 0, 590) & pool.cells(second.id, 0, 590)
            assert shared.any() and (pool.seq[shared] == 3).all()
        assert evaluated(model, PROMPT[:300] + [7, 8, 9]) == 303
    finally:
        model.close()


def measured(path, swa_full: bool):
    """fit's figures for the model loaded as sliding_model loads it, without allocating."""
    opened = open_model(path)
    try:
        return footprint_of(opened, LoadOptions(num_ctx=CELLS, batch_size=BATCH, threads=2,
                                                swa_full=swa_full))
    finally:
        opened.close()


def test_fit_measures_the_smaller_cache_that_is_allocated(long_gemma3, sliding_model):
    """Six layers, five sliding: 5 x 256 + 1024 cells against 6 x 1024, read off ggml's
    buffers, and fit's figures (made without allocating) are the allocated ones."""
    path = long_gemma3
    allocated = {f: sum(b.size for b in sliding_model(f).kv.buffers) for f in (False, True)}
    assert allocated[False] < allocated[True] * 0.42
    for swa_full in (False, True):
        footprint = measured(path, swa_full)
        assert footprint == sliding_model(swa_full).footprint()
        # the buffer rounds its size up to ggml's alignment
        assert 0 <= allocated[swa_full] - sum(map(sum, footprint.cache.values())) < 256
