"""GLM-4 beyond the common parity tests: the layout llama.cpp's converter writes (which of
transformers' four norms is which, half of each head rotated, nothing permuted), Q, K and V
with their biases fused in one tensor (as llama.cpp also reads them) computing the same
logits, the NextN layers a file may hold past its layers left out, and what is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pyggml
from runner.convert import CheckpointError, convert
from runner.engine.batch import Batch
from runner.models.base import ModelError

from tests.support.gguf_edit import rewrite
from tests.support.hf_tiny import checkpoint
from tests.support.hostile_checkpoint import rewritten
from tests.support.parity import PROMPT, executor

# transformers' name in layer 0 -> the GGUF tensor llama.cpp's converter makes of it
LAYOUT = {"input_layernorm.weight": "attn_norm.weight",
          "post_self_attn_layernorm.weight": "post_attention_norm.weight",
          "post_attention_layernorm.weight": "ffn_norm.weight",
          "post_mlp_layernorm.weight": "post_ffw_norm.weight",
          "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
          "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
          "mlp.gate_up_proj.weight": "ffn_up.weight"}


@pytest.fixture(scope="module")
def glm4(tmp_path_factory):
    directory = tmp_path_factory.mktemp("glm4")
    hf = checkpoint("glm4", directory / "hf")
    return hf, convert(hf, directory / "f32.gguf", "f32", progress=False)


def test_the_file_holds_llama_cpps_layout(glm4):
    from safetensors.numpy import load_file

    hf, path = glm4
    theirs = load_file(hf / "model.safetensors")
    with pyggml.GGUFFile(path) as file:
        assert file.metadata["glm4.rope.dimension_count"] == 8            # half of 16
        for name, gguf_name in LAYOUT.items():
            np.testing.assert_array_equal(file.read(f"blk.0.{gguf_name}"),
                                          theirs[f"model.layers.0.{name}"], err_msg=name)


def logits(path, backend, ids):
    return executor(path, backend)[1].logits(Batch.of_sequence(ids, 0, all_logits=True))


def test_fused_qkv_with_its_bias_computes_the_same_logits(glm4, backend, tmp_path):
    _, path = glm4

    def fuse(name, array, arrays):
        """attn_q, attn_k, attn_v (weights and biases) -> attn_qkv, at attn_v's place."""
        if not name.startswith("blk.") or name.split(".")[2] not in ("attn_q", "attn_k",
                                                                      "attn_v"):
            return {name: array}
        layer, kind, suffix = name.split(".")[1:]
        if kind != "attn_v":
            return {}
        return {f"blk.{layer}.attn_qkv.{suffix}": np.concatenate(
            [arrays[f"blk.{layer}.{part}.{suffix}"] for part in ("attn_q", "attn_k", "attn_v")])}

    fused = rewrite(path, tmp_path / "fused.gguf", tensors=fuse)
    model = executor(fused, backend)[0]
    assert model.model.blocks[0].attn_qkv_bias is not None
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    assert np.abs(logits(fused, backend, ids) - logits(path, backend, ids)).max() < 1e-5


def test_nextn_layers_are_left_out(glm4, backend, tmp_path):
    """A file holding one NextN layer after its layers (GLM-OCR's): that last block is not
    run, as in llama.cpp; one that would leave no layer is refused."""
    _, path = glm4
    one = rewrite(path, tmp_path / "one.gguf", values={"glm4.nextn_predict_layers": 1})
    model, run = executor(one, backend)
    assert len(model.model.blocks) == 1
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    assert np.isfinite(run.logits(Batch.of_sequence(ids, 0))).all()
    every = rewrite(path, tmp_path / "every.gguf", values={"glm4.nextn_predict_layers": 2})
    with pytest.raises(ModelError, match="glm4.nextn_predict_layers is 2, which leaves no "
                                         "layer"):
        executor(every, backend)


def test_m_rope_sections_are_refused(glm4, tmp_path):
    hf, _ = glm4
    config = json.loads((hf / "config.json").read_text())
    rope = dict(config["rope_parameters"], mrope_section=[2, 1, 1])
    bad = rewritten(hf, tmp_path / "bad", config={"rope_parameters": rope})
    with pytest.raises(CheckpointError, match="M-RoPE sections"):
        convert(bad, tmp_path / "x.gguf", "f32", progress=False)
