"""Phi-3 beyond the common parity tests (which run its tiny model in a context of 256, the
original context: the short factors, as transformers takes them for prompts within it):
LongRoPE's factors chosen by the context, as llama.cpp chooses them, against transformers'
rotations by either set; what the converter writes and what it refuses."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pyggml
from runner.convert import CheckpointError, convert
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.kvcache import new_cache
from runner.loading.loader import load_model

from tests.support.corpus import corpus
from tests.support.hf_tiny import PHI3_ROPE, checkpoint
from tests.support.hostile_checkpoint import rewritten
from tests.support.parity import PROMPT, reference

ORIGINAL = PHI3_ROPE["original_max_position_embeddings"]


@pytest.fixture(scope="module")
def phi3(tmp_path_factory):
    directory = tmp_path_factory.mktemp("phi3")
    hf = checkpoint("phi3", directory / "hf")
    return hf, convert(hf, directory / "f32.gguf", "f32", progress=False)


def run_in(path, backend, cells: int, sequences: int = 1):
    """(model, executor) with a cache of cells cells shared by sequences."""
    model = load_model(path, backend)
    kv = new_cache(model.model.cache_layers(), cells, backend, "f32", False)
    kv.partition(sequences)
    return model, Executor(model.model, kv, pyggml.Scheduler([backend]))


def long_prompt(tokenizer, length: int) -> list[int]:
    """PROMPT's ids, then the corpus's, to length ids."""
    ids = tokenizer.encode(PROMPT, add_special=True)
    for text in corpus([]):
        ids += tokenizer.encode(" " + text, add_special=False)
        if len(ids) >= length:
            return ids[:length]
    raise AssertionError("The corpus is too short.")


def test_the_context_chooses_the_factors_as_llama_cpp_does(phi3, backend):
    """A context larger than the original (512 over 256) rotates with the long factors from
    the first position on: a prompt that crosses 256 gives transformers' logits (which rotate
    it by the long factors, as it is longer than 256), and so does its beginning alone,
    which transformers rotates by the short ones when given alone. A context of 256 rotates
    by the short ones; so does one of 512 shared by two sequences (256 each)."""
    hf, path = phi3
    model, wide = run_in(path, backend, 2 * ORIGINAL)
    ids = long_prompt(model.tokenizer, ORIGINAL + 40)
    rotated_long = reference(hf, ids)
    ours = wide.logits(Batch.of_sequence(ids, 0, all_logits=True))
    assert np.abs(ours - rotated_long).max() < 1e-3
    head = ids[:20]
    ours_head = run_in(path, backend, 2 * ORIGINAL)[1].logits(
        Batch.of_sequence(head, 0, all_logits=True))
    assert np.abs(ours_head - rotated_long[:20]).max() < 1e-3
    rotated_short = reference(hf, head)
    assert np.abs(rotated_short - rotated_long[:20]).max() > 1e-2     # the sets differ
    for cells, sequences in ((ORIGINAL, 1), (2 * ORIGINAL, 2)):
        short = run_in(path, backend, cells, sequences)[1].logits(
            Batch.of_sequence(head, 0, all_logits=True))
        assert np.abs(short - rotated_short).max() < 1e-3, (cells, sequences)


def test_a_shift_rotates_keys_by_the_factors_that_rotated_them(phi3, backend):
    """In a context that takes the long factors, keys shifted back by 16 equal the keys
    computed at their new positions (the short factors would rotate them otherwise)."""
    _, path = phi3
    model, shifted = run_in(path, backend, 2 * ORIGINAL)
    ids = model.tokenizer.encode(PROMPT, add_special=True)[:12]
    shifted.logits(Batch.of_sequence(ids, 16))
    shifted.shift(0, 16, 28, -16)
    fresh = run_in(path, backend, 2 * ORIGINAL)[1]
    fresh.logits(Batch.of_sequence(ids, 0))
    for layer in range(len(shifted.kv.layers)):
        ours, theirs = (run.kv.k[layer].numpy(copy=True)[:len(ids)] for run in (shifted, fresh))
        assert np.abs(ours - theirs).max() < 1e-4, layer


def test_the_file_holds_llama_cpps_keys_and_factors(phi3):
    _, path = phi3
    with pyggml.GGUFFile(path) as file:
        meta = file.metadata
        assert meta["phi3.rope.dimension_count"] == 12                  # 0.75 of 16
        assert meta["phi3.rope.scaling.original_context_length"] == ORIGINAL
        assert meta["phi3.attention.sliding_window"] == 512
        assert math.isclose(meta["phi3.rope.scaling.attn_factor"],
                            math.sqrt(1 + math.log(4) / math.log(ORIGINAL)), rel_tol=1e-6)
        assert "phi3.rope.scaling.type" not in meta
        for name in ("long", "short"):
            np.testing.assert_array_equal(file.read(f"rope_factors_{name}.weight"),
                                          np.float32(PHI3_ROPE[f"{name}_factor"]))
        assert file.tensor_shape("blk.0.attn_qkv.weight") == ((4 + 2 * 2) * 16, 64)
        assert file.tensor_shape("blk.0.ffn_up.weight") == (2 * 128, 64)


@pytest.mark.parametrize("rope, refusal", [
    (dict(PHI3_ROPE, long_factor=[1.0] * 5), "long_factor must be 6 positive numbers"),
    (dict(PHI3_ROPE, short_factor=[1.0] * 5 + [float("nan")]),
     "short_factor must be 6 positive numbers"),
    (dict(PHI3_ROPE, rope_type="dynamic"), "'dynamic' with long and short factors is not "
                                           "supported")])
def test_malformed_longrope_is_refused(phi3, tmp_path, rope, refusal):
    hf, _ = phi3
    bad = rewritten(hf, tmp_path / "bad", config={"rope_parameters": rope})
    with pytest.raises(CheckpointError, match=refusal):
        convert(bad, tmp_path / "x.gguf", "f32", progress=False)
