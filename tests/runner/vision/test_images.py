"""Image bytes to pixels, against transformers' PIL image processors; bad bytes."""

from __future__ import annotations

import io

import numpy as np
import pytest

from runner.models.vision import images

from tests.support.hf_vision import png

SHAPES = [(40, 56), (20, 12)]          # non-square, and smaller than the model's size


@pytest.mark.parametrize("height,width", SHAPES)
@pytest.mark.parametrize("alpha", [False, True])
def test_gemma3_pixels_are_the_reference_processors(height, width, alpha):
    from PIL import Image
    from transformers import Gemma3ImageProcessorPil

    data = png(height + width, height, width, alpha)
    processor = Gemma3ImageProcessorPil(size={"height": 32, "width": 32})
    expected = processor(Image.open(io.BytesIO(data)), return_tensors="np")["pixel_values"][0]
    ours = images.pixels(images.resize(images.decode(data), 32, 32, "bilinear"),
                         (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    assert ours.shape == expected.shape == (3, 32, 32)
    assert np.array_equal(ours, expected)


def jpeg(seed: int, height: int, width: int, orientation: int = 1, mode: str = "RGB") -> bytes:
    """A random JPEG whose EXIF says how to turn it upright."""
    from PIL import Image

    channels = {"RGB": 3, "L": 1}[mode]
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, channels), np.uint8)
    image = Image.fromarray(pixels[..., 0] if mode == "L" else pixels, mode)
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    image.save(out, "JPEG", exif=exif.tobytes())
    return out.getvalue()


QWEN_IMAGES = {"odd": png(5, 37, 61), "small": png(6, 9, 7), "alpha": png(7, 30, 44, alpha=True),
               "grayscale": jpeg(8, 33, 50, mode="L"), "exif-rotated": jpeg(9, 24, 64, 6),
               "large": png(10, 120, 90)}


@pytest.mark.parametrize("kind", ["qwen2_5_vl", "qwen3_vl"])     # CLIP's normalization, 0.5's
@pytest.mark.parametrize("name", list(QWEN_IMAGES))
def test_qwen_vl_pixels_are_the_reference_processors(name, kind, vision_models):
    """The smart resize, patches in merge order and the grid, bit for bit (the reference
    given the image turned upright, as transformers' load_image turns it; its own RGB
    conversion composites transparency onto white, as ours)."""
    from PIL import ImageOps

    from runner.loading.loader import open_model

    from tests.support.hf_vision import processed

    paths = vision_models(kind)
    projector = open_model(paths["model"], projector=paths["mmproj"]).projectors["image"]
    data = QWEN_IMAGES[name]
    out = io.BytesIO()
    ImageOps.exif_transpose(Image_of(data)).save(out, "PNG")       # upright, losslessly
    expected = processed(kind, out.getvalue())
    ours = projector.preprocess(images.decode(data))
    patch = projector.config.patch
    frames = expected["pixel_values"].reshape(-1, 3, 2, patch, patch)
    assert np.array_equal(frames[:, :, 0], frames[:, :, 1])      # one frame, twice
    assert np.array_equal(ours.patches, frames[:, :, 0].reshape(len(frames), -1))
    assert [1, *ours.grid] == expected["image_grid_thw"][0].tolist()
    assert ours.rows == len(frames) // 4


def Image_of(data: bytes):
    from PIL import Image

    return Image.open(io.BytesIO(data))


def test_transparency_is_composited_onto_white():
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGBA", (2, 1), (10, 20, 30, 0)).save(out, "PNG")
    assert np.asarray(images.decode(out.getvalue())).tolist() == [[[255, 255, 255]] * 2]


@pytest.mark.parametrize("fmt", ["JPEG", "WEBP", "GIF", "BMP"])
def test_other_formats_decode(fmt):
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (5, 3), (200, 100, 50)).save(out, fmt)
    image = images.decode(out.getvalue())
    assert image.mode == "RGB" and image.size == (5, 3)


@pytest.mark.parametrize("data,message", [
    (b"", "empty"),
    (b"not an image at all", "not an image"),
    (png(0, 8, 8)[:40], "not an image"),
    ("a string", "must be bytes"),
])
def test_bad_bytes_are_a_clear_error(data, message):
    with pytest.raises(images.ImageError, match=message):
        images.decode(data)


def test_a_decompression_bomb_is_refused():
    from PIL import Image

    out = io.BytesIO()
    Image.new("1", (20000, 20000)).save(out, "PNG")
    with pytest.raises(images.ImageError, match="pixels"):
        images.decode(out.getvalue())
