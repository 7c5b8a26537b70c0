"""DeepSeek files come two ways: llama.cpp's converter splits kv_b into k_b and v_b for
latent attention (ours does too), Ollama's keeps kv_b and expanded heads. Both run, alike,
and so do Ollama's GLM-4.7-Flash files (glm4moelite) of either kind;
released checkpoints (one tensor per expert, a multi-token-prediction layer) convert to
the same file as transformers' own; what llama.cpp's deepseek2 cannot express is refused."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from runner.convert import CheckpointError, convert
from runner.engine.batch import Batch

from tests.support.architectures import GLM4_MOE_LITE_OLLAMA_ARCHITECTURE
from tests.support.gguf_edit import (deepseek2_ollama_layout, glm4moelite_ollama_layout,
                                     rewrite, tensors_of)
from tests.support.hf_released import per_expert
from tests.support.hf_tiny import checkpoint
from tests.support.parity import PROMPT, executor, reference

ARCH = "deepseek2"


@pytest.fixture(scope="module", params=["deepseek_v2", "deepseek_v3"])
def files(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(request.param)
    hf = checkpoint(request.param, directory / "hf")
    latent = convert(hf, directory / "latent.gguf", "f32", progress=False)
    return {"hf": hf, "latent": latent,
            "expanded": deepseek2_ollama_layout(latent, directory / "expanded.gguf")}


def test_ollamas_expanded_layout_runs_as_the_latent_one(files, backend):
    """Keys and values cached per head (192 and 128 wide in the released models) or as the
    latent rows: the same model, so the same logits, both those of transformers."""
    logits = {}
    for layout in ("latent", "expanded"):
        model, run = executor(files[layout], backend)
        assert model.model.config.latent == (layout == "latent")
        shape = model.model.cache_layers()[0]
        assert (shape.kv_heads == 1) == (layout == "latent")
        ids = model.tokenizer.encode(PROMPT, add_special=True)
        logits[layout] = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    assert np.abs(logits["latent"] - logits["expanded"]).max() < 1e-5
    assert np.abs(logits["latent"] - reference(files["hf"], ids)).max() < 1e-3


def test_flash_attention_reads_the_latent_values_from_the_keys(files, backend):
    """With flash attention and an f16 cache, a latent layer keeps keys only (rank + rotated
    a row; the values are their first rank dimensions), as llama.cpp's cache does: nearly
    half the memory, and the same logits as with values held apart."""
    from dataclasses import replace

    import pyggml
    from runner.engine.executor import Executor
    from runner.kvcache import CausalCache
    from runner.loading.loader import load_model

    model = load_model(files["latent"], backend)
    shapes = model.model.cache_layers()
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    logits, sizes = [], []
    for layers in (shapes, [replace(s, values_in_keys=False) for s in shapes]):
        kv = CausalCache(layers, 256, backend, "f16", True)
        sizes.append(sum(buffer.size for buffer in kv.buffers))
        run = Executor(model.model, kv, pyggml.Scheduler([backend]))
        logits.append(run.logits(Batch.of_sequence(ids, 0, all_logits=True)))
        assert all(v is None for v in kv.v) == (layers is shapes)
    np.testing.assert_array_equal(logits[0], logits[1])
    assert sizes[0] < 0.6 * sizes[1]


def test_released_checkpoints_convert_as_transformers_own(tmp_path):
    """One tensor per expert and the multi-token-prediction layer past num_hidden_layers
    (the released V3 and R1 have one): the same file as the fused checkpoint's."""
    fused = checkpoint("deepseek_v3", tmp_path / "fused")
    released = per_expert(fused, tmp_path / "released")
    (weights_file,) = released.glob("*.safetensors")
    tensors = load_file(weights_file)
    layers = json.loads((released / "config.json").read_text())["num_hidden_layers"]
    tensors[f"model.layers.{layers}.eh_proj.weight"] = np.zeros((64, 128), np.float32)
    tensors[f"model.layers.{layers}.self_attn.kv_b_proj.weight"] = \
        tensors["model.layers.0.self_attn.kv_b_proj.weight"]
    save_file(tensors, weights_file, metadata={"format": "pt"})
    a = convert(fused, tmp_path / "a.gguf", "f32", progress=False)
    b = convert(released, tmp_path / "b.gguf", "f32", progress=False)
    ours, theirs = tensors_of(a), tensors_of(b)
    assert ours.keys() == theirs.keys() and f"blk.{layers - 1}.attn_k_b.weight" in ours
    assert all(ours[name] == theirs[name] for name in ours)
    assert not any(name.startswith(f"blk.{layers}.") for name in ours)


@pytest.mark.parametrize("kind, change, words", [
    ("deepseek_v3", {"attention_bias": True}, "attention biases"),
    ("deepseek_v3", {"rope_interleave": False}, "interleaved pairs"),
    ("deepseek_v2", {"rope_parameters": {
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 1.0,
        "mscale_all_dim": 0.707, "original_max_position_embeddings": 16}}, "mscale"),
    ("deepseek_v2", {"scoring_func": "sqrtsoftplus"}, "scoring"),
])
def test_checkpoints_llama_cpp_cannot_run_are_refused(tmp_path, kind, change, words):
    hf = checkpoint(kind, tmp_path / "hf")
    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(CheckpointError, match=words):
        convert(hf, tmp_path / "out.gguf", "f32", progress=False)
    shutil.rmtree(hf)


def test_a_file_with_an_unknown_router_is_refused(files, tmp_path):
    from runner.loading.loader import load_model
    from runner.models.base import ModelError

    broken = rewrite(files["latent"], tmp_path / "broken.gguf",
                     values={f"{ARCH}.expert_gating_func": 7})
    with pytest.raises(ModelError, match="expert_gating_func is 7"):
        load_model(broken, None)


def test_ollamas_glm4moelite_files_read_as_the_same_model(tmp_path, backend):
    """GLM-4.7-Flash as Ollama's converter wrote it (architecture glm4moelite): with k_b and
    v_b, the lengths' meanings swapped and KV heads the heads, read swapped back as the
    latent form; before it split kv_b, the expanded form. Both give our file's logits, which
    are transformers'."""
    from runner.models import model_class

    hf = checkpoint("glm4_moe_lite", tmp_path / "hf")
    ours = convert(hf, tmp_path / "ours.gguf", "f32", progress=False)
    logits = {}
    for layout, path in {
            "ours": ours,
            "latent": glm4moelite_ollama_layout(ours, tmp_path / "latent.gguf"),
            "expanded": glm4moelite_ollama_layout(ours, tmp_path / "expanded.gguf",
                                                  latent=False)}.items():
        model, run = executor(path, backend)
        if layout != "ours":
            assert model.metadata["general.architecture"] == GLM4_MOE_LITE_OLLAMA_ARCHITECTURE
            assert type(model.model) is model_class(GLM4_MOE_LITE_OLLAMA_ARCHITECTURE)
        assert model.model.config.latent == (layout != "expanded")
        ids = model.tokenizer.encode(PROMPT, add_special=True)
        logits[layout] = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    assert np.array_equal(logits["ours"], logits["latent"])
    assert np.abs(logits["ours"] - logits["expanded"]).max() < 1e-5
    assert np.abs(logits["ours"] - reference(hf, ids)).max() < 1e-3
