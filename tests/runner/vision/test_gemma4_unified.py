"""Gemma 4 12B's ("unified") towers, gemma4uv and gemma4ua: a tiny
Gemma4UnifiedForConditionalGeneration converted with --mmproj gives transformers' image and
audio embeddings (f32)."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
from runner.convert import convert
from runner.loading.loader import open_model
from runner.models.vision import images
from runner.models.vision.gemma4uv import Gemma4UnifiedVision
from runner.models.audio.gemma4ua import Gemma4UnifiedAudio
from runner.multimodal.encoder import Encoder

from tests.support import hf_tiny, hf_vision
from tests.support.hf_vision import png

# 8-pixel patches (4 x a pool of 2), a table of 64 positions a side
VISION = dict(patch_size=4, pooling_kernel_size=2, mm_embed_dim=32, mm_posemb_size=64,
              output_proj_dims=32)
TOLERANCE = 1e-3


def unified(directory):
    import torch
    from transformers import (Gemma4UnifiedAudioConfig, Gemma4UnifiedConfig,
                              Gemma4UnifiedForConditionalGeneration, Gemma4UnifiedTextConfig,
                              Gemma4UnifiedVisionConfig)

    tok = hf_vision.tokenizer("gemma4")
    ids = tok.convert_tokens_to_ids
    text = Gemma4UnifiedTextConfig(**{**hf_tiny.SHAPE, **hf_tiny.GEMMA4_UNIFIED},
                                   vocab_size=len(tok), bos_token_id=tok.bos_token_id,
                                   eos_token_id=tok.eos_token_id, pad_token_id=0)
    config = Gemma4UnifiedConfig(text_config=text.to_dict(),
                                 vision_config=Gemma4UnifiedVisionConfig(**VISION).to_dict(),
                                 audio_config=Gemma4UnifiedAudioConfig().to_dict(),
                                 boi_token_id=ids("<|image>"), eoi_token_id=ids("<image|>"),
                                 image_token_id=ids("<|image|>"))
    torch.manual_seed(0)
    model = Gemma4UnifiedForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if "language_model" not in name:             # the norms' ones and zeros too
                value.copy_(torch.randn_like(value) * (0.5 if value.ndim > 1 else 1.0) +
                            (1.0 if name.endswith("ln1.weight") else 0.0))
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory, model


@pytest.fixture(scope="module")
def towers(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gemma4-unified")
    hf, model = unified(directory / "hf")
    gguf_path = convert(hf, directory / "model.gguf", "f32", progress=False,
                        mmproj=directory / "mmproj.gguf")
    loaded = open_model(gguf_path, projector=directory / "mmproj.gguf")
    cpu = pyggml.cpu_backend(threads=2)
    loaded.load_projector(cpu.device)
    encoders = {kind: Encoder(projector, pyggml.Scheduler([cpu]))
                for kind, projector in loaded.projectors.items()}
    yield model, encoders, {"model": gguf_path, "mmproj": directory / "mmproj.gguf"}
    for encoder in encoders.values():
        encoder.close()


def close(ours: np.ndarray, expected: np.ndarray) -> None:
    assert ours.shape == expected.shape
    assert np.abs(ours - expected).max() <= TOLERANCE * max(1.0, np.abs(expected).max())


@pytest.mark.parametrize("height,width", [(40, 56), (20, 12), (57, 31)])
def test_image_rows_are_the_reference_embeddings(towers, height, width):
    import torch

    model, encoders, _ = towers
    encoder = encoders["image"]
    assert type(encoder.projector) is Gemma4UnifiedVision
    pixels = encoder.projector.preprocess(images.decode(png(height * width, height, width)))
    n, p = pixels.patches.shape[0], encoder.projector.patch
    # the reference's patches: (row, column, channel) pixels; its positions (x, y) a patch
    hwc = pixels.patches.reshape(n, 3, p, p).transpose(0, 2, 3, 1).reshape(1, n, -1)
    positions = pixels.inputs["positions"].T[None].astype(np.int64)
    with torch.no_grad():
        expected = model.model.get_image_features(
            torch.tensor(hwc), torch.tensor(positions)).pooler_output[0].numpy()
    ours = encoder.encode(b"%d" % (height * width), pixels)
    assert ours.shape[0] == pixels.rows == n
    close(ours, expected)


def reference_patching():
    """transformers' convert_image_to_patches and patches_merge, read from its image
    processor's source (whose module needs torchvision, which is not installed here)."""
    import ast
    import math
    import os

    import torch
    import transformers

    path = os.path.join(os.path.dirname(transformers.__file__),
                        "models/gemma4_unified/image_processing_gemma4_unified.py")
    wanted = ("convert_image_to_patches", "patches_merge")
    found: dict = {"torch": torch, "math": math}
    for node in ast.parse(open(path).read()).body:
        if isinstance(node, ast.FunctionDef) and node.name in wanted:
            exec(compile(ast.Module([node], []), path, "exec"), found)
    return found["convert_image_to_patches"], found["patches_merge"]


@pytest.mark.parametrize("height,width", [(40, 56), (57, 31)])
def test_patches_and_positions_are_the_reference_processors(towers, height, width):
    """The reference cuts the resized image into 16-pixel (here 4) patches and merges each
    k x k into one: the same pixels, (row, column, channel) each, and (x, y) positions."""
    import torch

    _, encoders, _ = towers
    projector = encoders["image"].projector
    pixels = projector.preprocess(images.decode(png(height * width, height, width)))
    rows, cols = pixels.grid
    n, p, k = rows * cols, projector.patch, VISION["pooling_kernel_size"]
    small = VISION["patch_size"]
    planes = pixels.patches.reshape(rows, cols, 3, p, p).transpose(2, 0, 3, 1, 4) \
        .reshape(3, rows * p, cols * p)                                   # the resized image
    to_patches, merge = reference_patching()
    teacher = to_patches(torch.tensor(planes), small)
    xs, ys = torch.meshgrid(torch.arange(cols * k), torch.arange(rows * k), indexing="xy")
    merged, positions = merge(teacher[None], torch.stack([xs, ys], -1).reshape(-1, 2)[None], n)
    hwc = pixels.patches.reshape(n, 3, p, p).transpose(0, 2, 3, 1).reshape(n, -1)
    assert np.array_equal(merged[0].numpy(), hwc)
    assert np.array_equal(positions[0].numpy(), pixels.inputs["positions"].T)


def test_an_image_is_resized_to_whole_48_pixel_patches_within_1120():
    from runner.models.vision.gemma4v import fitted_size

    height, width = fitted_size(3000, 4000, 48, 1120, 1)
    assert height % 48 == 0 and width % 48 == 0
    assert (height // 48) * (width // 48) <= 1120


@pytest.mark.parametrize("samples", [640, 2000, 16000])
def test_audio_rows_are_the_reference_embeddings(towers, samples):
    import torch

    model, encoders, _ = towers
    encoder = encoders["audio"]
    assert type(encoder.projector) is Gemma4UnifiedAudio
    wave = np.random.default_rng(samples).uniform(-1, 1, samples).astype(np.float32)
    pixels = encoder.projector.preprocess(wave)
    frames = -(-samples // 640)
    assert pixels.patches.shape == (frames, 640) and pixels.rows == frames
    padded = np.zeros(frames * 640, np.float32)
    padded[:samples] = wave
    with torch.no_grad():
        expected = model.model.get_audio_features(
            torch.tensor(padded.reshape(1, frames, 640))).pooler_output[0].numpy()
    close(encoder.encode(b"a%d" % samples, pixels), expected)


@pytest.mark.slow
def test_llama_cpp_encodes_the_same_rows(towers):
    """llama.cpp's mtmd reads both towers of our file: the same rows for audio, and for
    images whose size both keep (1120 8-pixel patches exactly: llama.cpp keeps any size
    within 70 to 1120 patches, ours scales to the budget as transformers' processor does)."""
    from tests.support.mtmd import mtmd_rows

    _, encoders, paths = towers
    wave = np.random.default_rng(0).uniform(-1, 1, 2000).astype(np.float32)
    audio = encoders["audio"]
    ours = audio.encode(b"llama.cpp audio", audio.projector.preprocess(wave))
    close(ours, mtmd_rows(paths["model"], paths["mmproj"], wave))
    image = encoders["image"]
    for height, width in [(224, 320), (280, 256)]:
        picture = images.decode(png(height + width, height, width))
        pixels = image.projector.preprocess(picture)
        assert pixels.grid == (height // 8, width // 8)
        ours = image.encode(b"llama.cpp %dx%d" % (height, width), pixels)
        close(ours, mtmd_rows(paths["model"], paths["mmproj"], np.asarray(picture)))


def test_an_f16_file_types_the_tensors_as_llama_cpps_converter(tmp_path):
    """F16 for the patch kernel, the position table and both projections (llama.cpp's
    converter keeps only the other Gemma 4's table F32), F32 for the vectors."""
    import gguf

    hf, _ = unified(tmp_path / "hf")
    convert(hf, tmp_path / "model.gguf", "f16", progress=False, mmproj=tmp_path / "mm.gguf")
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(tmp_path / "mm.gguf").tensors}
    f16 = {"v.patch_embd.weight", "v.position_embd.weight", "mm.input_projection.weight",
           "mm.a.input_projection.weight"}
    assert {name for name, kind in types.items() if kind == "F16"} == f16
    assert all(kind == "F32" for name, kind in types.items() if name not in f16)
