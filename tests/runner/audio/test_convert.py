"""Gemma 4's audio tower in the mmproj, as llama.cpp's converter writes it: the keys its
gemma4a loader reads, its tensor names, softplus'd per_dim_scale, (C, K) depthwise kernels,
F32 convolutions even in an f16 file; both towers named per modality."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file

import pyggml
from runner.convert import convert

from tests.support import hf_audio

# clip.cpp's load_hparams for an audio projector (and the mixed-file keys)
REQUIRED = ["clip.has_audio_encoder", "clip.audio.projector_type",
            "clip.audio.embedding_length", "clip.audio.feed_forward_length",
            "clip.audio.block_count", "clip.audio.attention.head_count",
            "clip.audio.attention.layer_norm_epsilon", "clip.audio.projection_dim",
            "clip.audio.num_mel_bins", "clip.has_vision_encoder", "clip.vision.projector_type"]
BLOCK = ["ffn_norm", "ffn_up", "ffn_down", "ffn_post_norm", "attn_pre_norm", "attn_q",
         "attn_k", "attn_v", "attn_out", "attn_k_rel", "per_dim_scale", "attn_post_norm",
         "conv_norm", "conv_pw1", "conv_dw", "norm_conv", "conv_pw2", "ffn_norm_1",
         "ffn_up_1", "ffn_down_1", "ffn_post_norm_1", "ln2"]


def test_the_mmproj_has_llama_cpps_keys_and_names(audio_model):
    f = pyggml.GGUFFile(audio_model["mmproj"])
    meta, names = f.metadata, {t.name for t in f.header.tensors}
    assert all(key in meta for key in REQUIRED)
    assert meta["clip.audio.projector_type"] == "gemma4a"
    assert meta["clip.vision.projector_type"] == "gemma4v"
    for i in range(meta["clip.audio.block_count"]):
        assert {f"a.blk.{i}.{name}.weight" for name in BLOCK} <= names
        assert f"a.blk.{i}.attn_q.input_min" in names
    assert {"a.conv1d.0.weight", "a.conv1d.1.norm.weight", "a.input_projection.weight",
            "a.pre_encode.out.bias", "mm.a.input_projection.weight"} <= names


def test_tensors_are_transformed_as_llama_cpp_reads_them(audio_model):
    hf = load_file(str(audio_model["hf"] / "model.safetensors"))
    ours = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(audio_model["mmproj"]).tensors}
    scale = hf["model.audio_tower.layers.1.self_attn.per_dim_scale"]
    assert np.allclose(ours["a.blk.1.per_dim_scale.weight"], np.logaddexp(0, scale))
    kernel = hf["model.audio_tower.layers.0.lconv1d.depthwise_conv1d.weight"]
    assert np.array_equal(ours["a.blk.0.conv_dw.weight"], kernel[:, 0, :])
    pre = hf["model.audio_tower.layers.0.lconv1d.pre_layer_norm.weight"]
    assert np.array_equal(ours["a.blk.0.conv_norm.weight"], pre)   # llama.cpp's swapped names


@pytest.mark.parametrize("outtype", ["f16"])
def test_convolutions_stay_f32_in_an_f16_file(audio_model, tmp_path, outtype):
    mmproj = tmp_path / "mmproj.gguf"
    convert(audio_model["hf"], tmp_path / "model.gguf", outtype, progress=False, mmproj=mmproj)
    types = {t.name: pyggml.dtypes.type_name(t.type)
             for t in pyggml.GGUFFile(mmproj).header.tensors}
    assert types["a.blk.0.attn_q.weight"] == "f16"
    for name in ("a.conv1d.0.weight", "a.conv1d.1.weight", "a.blk.0.conv_dw.weight"):
        assert types[name] == "f32", name


@pytest.mark.slow
def test_llama_cpp_loads_the_mmproj_and_hears_the_same(audio_model, audio_reference):
    """llama.cpp's mtmd reads both towers of our file and encodes audio to the rows the
    reference makes; it departs by ~6e-4 relative (measured; its front end and epsilon are
    its own), ours by ~1e-7."""
    pytest.importorskip("llama_cpp")
    from tests.support.mtmd import mtmd_rows

    clip = hf_audio.tone(3.3, 16000)
    expected = hf_audio.encoded(audio_reference, clip)
    theirs = mtmd_rows(audio_model["model"], audio_model["mmproj"], clip)
    assert theirs.shape == expected.shape
    assert np.abs(theirs - expected).max() / np.abs(expected).max() <= 2e-3
