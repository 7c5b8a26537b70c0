"""Image bytes to pixels, against transformers' PIL image processors; bad bytes."""

from __future__ import annotations

import io

import numpy as np
import pytest

from runner.models.vision import images

from .hf_vision import png

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
    assert np.abs(ours - expected).max() <= 1e-6


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
