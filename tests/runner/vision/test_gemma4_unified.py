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


@pytest.mark.parametrize("height,width,expected", [
    (480, 640, (480, 624)),       # 10 x 13 patches: within 70 to 1120, kept
    (600, 1200, (624, 1200)),     # 12.5 rounds away from zero (std::round), not to even
    (50, 100, (288, 576)),        # 2 patches: scaled up past 70, sides rounded up
    (3000, 4000, (1344, 1824)),   # 5229 patches: scaled down under 1120, sides rounded down
])
def test_an_image_is_sized_as_llama_cpps_mtmd_sizes_it(height, width, expected):
    from runner.models.vision.mtmd_sizing import cell_size

    assert cell_size(height, width, 48, 70, 1120) == expected


def test_an_image_is_fitted_onto_its_patch_grid_centred_on_black():
    """130 x 100 onto 128 x 104: scaled by 128/130, 99 columns wide (98.46 rounded up), two
    black columns on the left and three on the right, as llama.cpp's PAD_CEIL resize."""
    from PIL import Image

    from runner.models.vision.mtmd_sizing import letterboxed

    white = Image.new("RGB", (100, 130), "white")
    planes = np.asarray(letterboxed(white, 128, 104, "bicubic"))              # (H, W, 3)
    assert planes.shape == (128, 104, 3)
    assert not planes[:, [0, 1, 101, 102, 103]].any()
    assert (planes[:, 2:101] == 255).all()


def test_the_largest_image_fills_the_budget(towers):
    _, encoders, _ = towers
    assert encoders["image"].projector.largest().rows == 1120


def test_an_image_too_narrow_for_the_budget_is_refused(towers):
    _, encoders, _ = towers
    with pytest.raises(images.ImageError, match="too narrow"):
        encoders["image"].projector.preprocess(images.blank(10, 100000))


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


# (height, width) and the patch grid llama.cpp's mtmd gives with 8-pixel patches
MTMD_SIZES = [
    ((224, 320), (28, 40)),       # 1120 patches: kept as it is
    ((130, 100), (16, 13)),       # within 70 to 1120: fitted onto 128 x 104, black at the sides
    ((30, 40), (8, 10)),          # 20 patches: scaled up to at least 70
    ((400, 600), (27, 40)),       # 3750 patches: scaled down to at most 1120
    ((20, 300), (3, 38)),         # 2.5 x 37.5 patches, both rounded up; black above and below
    ((600, 200), (57, 19)),       # tall, over the budget (Pillow alone resizes its height first)
]


@pytest.mark.slow
def test_llama_cpp_encodes_the_same_rows(towers):
    """llama.cpp's mtmd reads both towers of our file: the same rows, bit for bit, for audio
    and for images of any size (its sizing: kept within 70 to 1120 patches, scaled outside,
    fitted onto the patch grid with black borders)."""
    from tests.support.mtmd import mtmd_rows

    _, encoders, paths = towers
    wave = np.random.default_rng(0).uniform(-1, 1, 2000).astype(np.float32)
    audio = encoders["audio"]
    ours = audio.encode(b"llama.cpp audio", audio.projector.preprocess(wave))
    close(ours, mtmd_rows(paths["model"], paths["mmproj"], wave))
    image = encoders["image"]
    for (height, width), grid in MTMD_SIZES:
        picture = images.decode(png(height + width, height, width))
        pixels = image.projector.preprocess(picture)
        assert pixels.grid == grid
        ours = image.encode(b"llama.cpp %dx%d" % (height, width), pixels)
        theirs = mtmd_rows(paths["model"], paths["mmproj"], np.asarray(picture))
        assert theirs.shape[0] == grid[0] * grid[1]
        assert np.array_equal(ours, theirs), f"{height}x{width}: {np.abs(ours - theirs).max()}"


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
