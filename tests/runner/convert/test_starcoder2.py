"""StarCoder2 beyond the common parity tests: a released configuration (a sliding window of
4096, which llama.cpp does not apply) converts, and what the converter and the model
refuse."""

from __future__ import annotations


import pytest

import pyggml
from runner.convert import CheckpointError, convert
from runner.models.base import ModelError

from tests.support.gguf_edit import rewrite
from tests.support.hf_tiny import checkpoint
from tests.support.hostile_checkpoint import rewritten
from tests.support.parity import executor


@pytest.fixture(scope="module")
def starcoder2(tmp_path_factory):
    directory = tmp_path_factory.mktemp("starcoder2")
    hf = checkpoint("starcoder2", directory / "hf")
    return hf, convert(hf, directory / "f32.gguf", "f32", progress=False)


def test_a_released_window_converts_and_is_not_written(starcoder2, tmp_path):
    hf, _ = starcoder2
    windowed = rewritten(hf, tmp_path / "w", config={"sliding_window": 4096,
                                                     "max_position_embeddings": 16384})
    with pyggml.GGUFFile(convert(windowed, tmp_path / "w.gguf", "f32", progress=False)) as file:
        assert file.metadata["starcoder2.context_length"] == 16384
        assert file.metadata["starcoder2.attention.layer_norm_epsilon"] == pytest.approx(1e-5)
        assert not any("sliding_window" in key for key in file.metadata)


@pytest.mark.parametrize("changes, message", [
    (dict(use_bias=False), "without biases is not supported"),
    (dict(hidden_act="relu"), "with relu is not supported")])
def test_what_llama_cpp_cannot_run_is_refused(starcoder2, tmp_path, changes, message):
    hf, _ = starcoder2
    with pytest.raises(CheckpointError, match=message):
        convert(rewritten(hf, tmp_path / "bad", config=changes), tmp_path / "x.gguf", "f32",
                progress=False)


@pytest.mark.parametrize("keys, values, drop, message", [
    (["starcoder2.attention.layer_norm_epsilon"], {}, None,
     "lacks the metadata key starcoder2.attention.layer_norm_epsilon"),
    ([], {"starcoder2.rope.dimension_count": 8}, None,
     "dimension_count is 8, not the whole head"),
    ([], {}, "blk.1.ffn_up.bias", "no tensor blk.1.ffn_up.bias"),
    ([], {}, "output_norm.bias", "no tensor output_norm.bias")])
def test_malformed_files_are_refused(starcoder2, backend, tmp_path, keys, values, drop,
                                     message):
    _, path = starcoder2
    bad = rewrite(path, tmp_path / "bad.gguf", keys=dict.fromkeys(keys), values=values,
                  tensors=lambda name, array, _: {} if name == drop else {name: array})
    with pytest.raises(ModelError, match=message):
        executor(bad, backend)
