"""Command R and Command R7B beyond the common parity tests: the file llama.cpp's converter
writes (no output projection, zero biases left out, Command R+'s per-head norms kept F32,
Command R's trained context, cohere2's layers as one bool each), a layer pattern other than
transformers' default, and what the converter and the model refuse."""

from __future__ import annotations


import numpy as np
import pytest

import pyggml
from runner.convert import CheckpointError, convert
from runner.engine.batch import Batch
from runner.models.base import ModelError

from tests.support.gguf_edit import rewrite
from tests.support.hf_tiny import checkpoint
from tests.support.hostile_checkpoint import rewritten
from tests.support.parity import PROMPT, executor, reference

SLIDING, FULL = "sliding_attention", "full_attention"


@pytest.fixture(scope="module")
def cohere2(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cohere2")
    hf = checkpoint("cohere2", directory / "hf")
    return hf, convert(hf, directory / "f32.gguf", "f32", progress=False)


def test_command_r_files_hold_llama_cpps_layout(tmp_path):
    """No output projection (tied), the output's zero biases left out and Q/K/V's kept,
    Command R+'s norms per head in F32 in an F16 file, the context model_max_length gives."""
    hf = rewritten(checkpoint("cohere", tmp_path / "hf"), tmp_path / "long",
                   config={"model_max_length": 1024})
    with pyggml.GGUFFile(convert(hf, tmp_path / "f16.gguf", "f16", progress=False)) as file:
        meta, tensors = file.metadata, {t.name: t for t in file.header.tensors}
        assert meta["command-r.context_length"] == 1024
        assert meta["command-r.logit_scale"] == 0.25
        assert meta["command-r.rope.scaling.type"] == "none"
        assert "output.weight" not in tensors and "blk.0.attn_output.bias" not in tensors
        assert "blk.0.attn_q.bias" in tensors
        norm = tensors["blk.0.attn_q_norm.weight"]
        assert (norm.ne, pyggml.dtypes.type_name(norm.type)) == ((16, 4), "f32")   # ggml order


def test_cohere2_writes_one_bool_per_layer_and_reads_any_pattern(cohere2, backend, tmp_path):
    """layer_types as a bool array (transformers' default is llama.cpp's: the fourth
    global); another pattern runs as transformers runs it; a file giving the pattern as a
    number is read as llama.cpp reads it (2: every other layer global)."""
    hf, path = cohere2
    with pyggml.GGUFFile(path) as file:
        assert file.metadata["cohere2.attention.sliding_window_pattern"] == \
            [True, True, True, False]
    other = rewritten(hf, tmp_path / "other",
                      config={"layer_types": [FULL, SLIDING, FULL, SLIDING]})
    model, run = executor(convert(other, tmp_path / "other.gguf", "f32", progress=False),
                          backend)
    assert model.model.config.sliding == (False, True, False, True)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    assert np.abs(ours - reference(other, ids)).max() < 1e-3
    key = "cohere2.attention.sliding_window_pattern"
    numbered = rewrite(path, tmp_path / "n.gguf", keys={key: None}, values={key: 2})
    assert executor(numbered, backend)[0].model.config.sliding == (True, False, True, False)


@pytest.mark.parametrize("changes, message", [
    (dict(tie_word_embeddings=False), "output projection of its own"),
    (dict(head_dim=8), "4 heads of 8 do not make up its hidden size"),
    (dict(layer_types=[SLIDING, FULL]), "for each of the 4 layers")])
def test_what_llama_cpp_cannot_run_is_refused(cohere2, tmp_path, changes, message):
    hf, _ = cohere2
    with pytest.raises(CheckpointError, match=message):
        convert(rewritten(hf, tmp_path / "bad", config=changes), tmp_path / "x.gguf", "f32",
                progress=False)


def test_a_bias_on_the_attentions_output_is_refused(tmp_path):
    from safetensors.numpy import load_file, save_file

    hf = checkpoint("cohere", tmp_path / "hf")
    tensors = load_file(hf / "model.safetensors")
    tensors["model.layers.1.self_attn.o_proj.bias"] += 0.5
    save_file(tensors, hf / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="o_proj.bias is a bias on the attention's "
                                              "output"):
        convert(hf, tmp_path / "x.gguf", "f32", progress=False)


@pytest.mark.parametrize("values, message", [
    ({"cohere2.logit_scale": None}, "lacks the metadata key cohere2.logit_scale"),
    ({"cohere2.attention.layer_norm_epsilon": None},
     "lacks the metadata key cohere2.attention.layer_norm_epsilon"),
    ({"cohere2.attention.sliding_window": 0}, "sliding_window is 0, but a sliding layer"),
    ({"cohere2.attention.sliding_window_pattern": [True, False]},
     "not one bool for each of the 4 layers"),
    ({"cohere2.attention.key_length": 8, "cohere2.attention.value_length": 8,
      "cohere2.rope.dimension_count": 8}, "heads of 8 do not make up")])
def test_malformed_files_are_refused_naming_the_key(cohere2, backend, tmp_path, values,
                                                     message):
    _, path = cohere2
    bad = rewrite(path, tmp_path / "bad.gguf", keys=dict.fromkeys(values),
                  values={key: value for key, value in values.items() if value is not None})
    with pytest.raises(ModelError, match=message):
        executor(bad, backend)
