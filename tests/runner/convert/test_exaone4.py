"""EXAONE 4.0 beyond the common parity tests (whose tiny model is the 32B's kind: 64 layers,
hybrid attention): the 1.2B's kind (every layer global and rotated); hybrid attention by
the layer count alone, as llama.cpp decides it (a window and a pattern in a file of
another count change nothing); the keys checked as they are read; what the converter
refuses because llama.cpp would run it unlike transformers."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
from runner.convert import CheckpointError, convert
from runner.engine.batch import Batch
from runner.loading.loader import open_model
from runner.models.base import ModelError

from tests.support.gguf_edit import rewrite
from tests.support.hf_tiny import EXAONE4_SMALL, checkpoint
from tests.support.parity import PROMPT, executor, reference

ARCH = "exaone4"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    directory = tmp_path_factory.mktemp("exaone4")
    hf = checkpoint(ARCH, directory / "hf", **EXAONE4_SMALL)
    return hf, convert(hf, directory / "f32.gguf", "f32", progress=False)


def logits(path, backend, ids):
    return executor(path, backend)[1].logits(Batch.of_sequence(ids, 0, all_logits=True))


def test_the_small_kind_rotates_every_layer_over_the_whole_context(small, backend):
    hf, path = small
    model, _ = executor(path, backend)
    config = model.model.config
    assert config.window is None and config.rope_layers is None
    with pyggml.GGUFFile(path) as file:
        assert "output.weight" not in file.tensors_info                     # tied
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    assert np.abs(logits(path, backend, ids) - reference(hf, ids)).max() < 1e-3


def test_a_window_outside_64_layers_changes_nothing(small, backend, tmp_path):
    """llama.cpp's exaone4 slides windows in 64-layer models only: a 4-layer file naming
    a window of 2 and every layer sliding runs as without them."""
    _, path = small
    windowed = rewrite(path, tmp_path / "windowed.gguf", values={
        f"{ARCH}.attention.sliding_window": 2,
        f"{ARCH}.attention.sliding_window_pattern": [True] * 4})
    model, _ = executor(windowed, backend)
    assert model.model.config.window is None
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    np.testing.assert_array_equal(logits(windowed, backend, ids), logits(path, backend, ids))


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory):
    directory = tmp_path_factory.mktemp("exaone4_hybrid")
    return convert(checkpoint(ARCH, directory / "hf"), directory / "f32.gguf", "f32",
                   progress=False)


def test_the_64_layer_kind_reads_its_window_and_pattern(hybrid, tmp_path):
    config = open_model(hybrid).model.config
    assert config.window == 8 and config.rope_layers[:4] == (True, True, True, False)
    assert [config.window_of(i) for i in range(4)] == [8, 8, 8, None]
    model = open_model(rewrite(hybrid, tmp_path / "defaults.gguf", keys={
        f"{ARCH}.attention.sliding_window": None,
        f"{ARCH}.attention.sliding_window_pattern": None})).model
    assert model.config.window == 4096                                      # llama.cpp's
    assert model.config.rope_layers == tuple(i % 4 != 3 for i in range(64))
    assert model.shift(None, None, 3) is None                  # a global layer's keys stay


@pytest.mark.parametrize("values, words", [
    ({"attention.sliding_window_pattern": [True] * 63},
     "sliding_window_pattern is .*, not one bool for each of the 64 layers"),
    ({"attention.sliding_window": 0}, "sliding_window is 0, but a sliding layer must see"),
    ({"rope.dimension_count": 8}, "rope.dimension_count is 8, not the head size"),
    ({"attention.value_length": 8}, "value_length is 8, not the keys' head size"),
    ({"nextn_predict_layers": 64}, "nextn_predict_layers is 64, which leaves no layer"),
])
def test_malformed_keys_are_refused_naming_them(hybrid, tmp_path, values, words):
    path = rewrite(hybrid, tmp_path / "bad.gguf",
                   values={f"{ARCH}.{key}": value for key, value in values.items()})
    with pytest.raises(ModelError, match=words):
        open_model(path)


@pytest.mark.parametrize("settings, words", [
    (dict(num_hidden_layers=4), "a sliding window of 8 in 4 layers"),
    (dict(sliding_window=None, layer_types=["full_attention"] * 64),
     "64 layers and no sliding window"),
    (dict(EXAONE4_SMALL, head_dim=8), "4 heads of 8 do not make up its hidden_size"),
])
def test_checkpoints_llama_cpp_would_run_unlike_transformers_are_refused(tmp_path, settings,
                                                                         words):
    hf = checkpoint(ARCH, tmp_path / "hf", **settings)
    with pytest.raises(CheckpointError, match=words):
        convert(hf, tmp_path / "out.gguf", "f32", progress=False)
