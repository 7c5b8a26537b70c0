"""Our mmproj files as llama.cpp reads them: every key its clip loader requires (listed
from tools/mtmd/clip.cpp, clip_model_loader::load_hparams and load_tensors, for a vision
encoder of each projector type), and, where llama-cpp-python is installed (slow), libmtmd
loading them and encoding an image to our rows."""

from __future__ import annotations

import io

import numpy as np
import pytest

import pyggml
from runner.convert import CheckpointError, convert
from runner.loading.loader import open_model
from runner.models.vision import images

# keys every vision mmproj must carry (get_u32/get_f32 with required=true, and the
# image_mean/image_std asserts), then the tensors each projector type's loader requires
REQUIRED_KEYS = ["general.architecture", "clip.has_vision_encoder", "clip.projector_type",
                 "clip.vision.embedding_length", "clip.vision.attention.head_count",
                 "clip.vision.feed_forward_length", "clip.vision.block_count",
                 "clip.vision.projection_dim", "clip.vision.attention.layer_norm_epsilon",
                 "clip.vision.image_size", "clip.vision.patch_size", "clip.vision.image_mean",
                 "clip.vision.image_std"]
REQUIRED_TENSORS = {       # checkpoint kind -> (projector type, its tensors)
    "gemma3": ("gemma3", ["v.patch_embd.weight", "v.position_embd.weight",
                          "mm.input_projection.weight", "mm.soft_emb_norm.weight",
                          "v.post_ln.weight"]),
    "gemma4": ("gemma4v", ["v.patch_embd.weight", "v.position_embd.weight",
                           "mm.input_projection.weight"]),
    "llava": ("mlp", ["v.patch_embd.weight", "v.position_embd.weight", "v.class_embd",
                      "v.pre_ln.weight", "mm.0.weight", "mm.0.bias", "mm.2.weight",
                      "mm.2.bias"]),
    "mistral3": ("pixtral", ["v.patch_embd.weight", "v.pre_ln.weight", "mm.input_norm.weight",
                             "mm.patch_merger.weight", "mm.1.weight", "mm.2.weight",
                             "v.token_embd.img_break"]),
    "pixtral": ("pixtral", ["v.patch_embd.weight", "v.pre_ln.weight", "mm.1.weight", "mm.1.bias",
                            "mm.2.weight", "mm.2.bias", "v.token_embd.img_break"]),
    "qwen2_5_vl": ("qwen2.5vl_merger", ["v.patch_embd.weight", "v.patch_embd.weight.1",
                                        "v.post_ln.weight", "mm.0.weight", "mm.0.bias",
                                        "mm.2.weight", "mm.2.bias"]),
    "qwen2_vl": ("qwen2vl_merger", ["v.patch_embd.weight", "v.patch_embd.weight.1",
                                    "v.post_ln.weight", "v.post_ln.bias", "mm.0.weight",
                                    "mm.2.weight"]),
    # the deepstack mergers follow blocks 0 and 2 of the tiny tower
    "qwen3_vl": ("qwen3vl_merger", ["v.patch_embd.weight", "v.patch_embd.weight.1",
                                    "v.patch_embd.bias", "v.position_embd.weight",
                                    "v.post_ln.weight", "mm.0.weight", "mm.0.bias",
                                    "mm.2.weight", "mm.2.bias",
                                    *[f"v.deepstack.{i}.{t}.{k}" for i in (0, 2)
                                      for t in ("norm", "fc1", "fc2")
                                      for k in ("weight", "bias")]]),
    # Qwen 3.5's: Qwen3-VL's without deepstack
    "qwen3_5": ("qwen3vl_merger", ["v.patch_embd.weight", "v.patch_embd.weight.1",
                                   "v.patch_embd.bias", "v.position_embd.weight",
                                   "v.post_ln.weight", "mm.0.weight", "mm.0.bias",
                                   "mm.2.weight", "mm.2.bias"]),
}
# the image a kind is encoded at, where its own size would be resized (differently: llama.cpp
# keeps Qwen's images between 8 and 4096 cells, the tiny processor between 4 and 64)
SIZES = {"qwen2_5_vl": (40, 56), "qwen2_vl": (40, 56), "qwen3_vl": (40, 56),
         "qwen3_5": (40, 56)}
# where llama.cpp departs from transformers (which ours matches to 1e-4, test_encoders):
# its LLaVA graph puts the class token last yet reads rows 1..P and its projector uses tanh
# GELU; its Gemma 4 resizes images its own way (bilinear, to other sizes)
DEPARTS = {"llava", "gemma4"}
BLOCK_TENSORS = ["ln1", "ln2", "attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down"]
FUSED_BLOCK_TENSORS = ["ln1", "ln2", "attn_qkv", "attn_out", "ffn_up", "ffn_down"]   # Qwen3-VL's


@pytest.mark.parametrize("kind", list(REQUIRED_TENSORS))
def test_the_mmproj_carries_what_llama_cpp_requires(kind, vision_models):
    projector = pyggml.GGUFFile(vision_models(kind)["mmproj"])
    meta = projector.metadata
    assert [key for key in REQUIRED_KEYS if key not in meta] == []
    projector_type, tensors = REQUIRED_TENSORS[kind]
    assert meta["general.architecture"] == "clip"
    assert meta["clip.projector_type"] == projector_type
    assert len(meta["clip.vision.image_mean"]) == len(meta["clip.vision.image_std"]) == 3
    names = set(projector.tensors_info)
    layers = meta["clip.vision.block_count"]
    block = FUSED_BLOCK_TENSORS if kind in ("qwen3_vl", "qwen3_5") else BLOCK_TENSORS
    wanted = tensors + [f"v.blk.{i}.{t}.weight" for i in range(layers) for t in block]
    assert [name for name in wanted if name not in names] == []


def test_a_text_checkpoint_has_no_mmproj(tmp_path):
    from tests.support.hf_tiny import checkpoint

    hf = checkpoint("llama", tmp_path / "hf")
    with pytest.raises(CheckpointError, match="no vision tower"):
        convert(hf, tmp_path / "m.gguf", "f32", progress=False, mmproj=tmp_path / "p.gguf")


def test_a_model_file_is_not_a_projector(vision_models):
    paths = vision_models("gemma3")
    with pytest.raises(ValueError, match="not a projector"):
        open_model(paths["model"], projector=paths["model"])


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(REQUIRED_TENSORS))
def test_llama_cpp_loads_the_mmproj_and_encodes_our_rows(kind, vision_models):
    pytest.importorskip("llama_cpp")
    from PIL import Image

    from runner.multimodal.encoder import Encoder

    from tests.support.mtmd import mtmd_rows

    paths = vision_models(kind)
    loaded = open_model(paths["model"], projector=paths["mmproj"])
    size = loaded.projectors["image"].config.image_size          # no resize: the same pixels
    height, width = SIZES.get(kind, (size, size))
    rgb = np.random.default_rng(3).integers(0, 256, (height, width, 3), np.uint8)
    expected = mtmd_rows(paths["model"], paths["mmproj"], rgb)
    cpu = pyggml.cpu_backend(threads=2)
    loaded.load_projector(cpu.device)
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, "PNG")
    encoder = Encoder(loaded.projectors["image"], pyggml.Scheduler([cpu]))
    pixels = loaded.projectors["image"].preprocess(images.decode(out.getvalue()))
    ours = encoder.encode(b"x", pixels)
    encoder.close()
    assert ours.shape[1] == expected.shape[1]
    if kind in DEPARTS:
        return              # it loads and encodes our file; its numbers are its own
    assert ours.shape == expected.shape
    if REQUIRED_TENSORS[kind][0] == "pixtral":
        # llama.cpp 0.3.36's pixtral graph now and then leaves its [IMG_BREAK] rows NaN (the
        # same file, run after run: seen in about one run of seven); the other rows agree
        broken = np.isnan(expected).any(axis=1)
        pixtral = loaded.projectors["image"]
        cols = pixtral.config.image_size // (pixtral.config.patch * pixtral.merge) + 1
        assert all(row % cols == cols - 1 for row in np.flatnonzero(broken))
        ours, expected = ours[~broken], expected[~broken]
    # an independent implementation, not the reference: it agrees to about 2e-4 of the
    # largest value (transformers, the reference, agrees with ours to 1e-5: test_encoders)
    assert np.abs(ours - expected).max() <= 1e-3 * max(1.0, np.abs(expected).max())
