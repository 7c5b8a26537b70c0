"""Image bytes to the pixel arrays encoders read, as Hugging Face's PIL image processors make
them: Pillow decodes (JPEG, PNG, WebP, GIF, BMP), an EXIF orientation is applied (as
transformers' load_image does: a phone's portrait photo stands upright), transparency is
composited onto white, the resize is Pillow's with the filter the family's processor names,
then rescale to [0, 1] and normalize in transformers' precisions. Same Pillow, same filter:
the same pixels, bit for bit.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, ImageOps

RESAMPLE = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}
MAX_PIXELS = 64 * 1024 * 1024        # a decompression bomb is refused, not decoded
# OpenAI CLIP's normalization, which LLaVA's, Pixtral's and Qwen-VL's processors use
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


class ImageError(ValueError):
    """Bytes that are not an image this runner reads."""


def decode(data: bytes) -> Image.Image:
    """An RGB image from encoded bytes; transparent pixels become white (as the reference
    processors composite them)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ImageError(f"An image must be bytes, not {type(data).__name__}.")
    if not data:
        raise ImageError("The image is empty (no bytes).")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            if image.width * image.height > MAX_PIXELS:
                raise ImageError(f"The image is {image.width}x{image.height} pixels; at most "
                                 f"{MAX_PIXELS} pixels are read.")
            image.load()
    except ImageError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombWarning,
            Image.DecompressionBombError) as error:
        raise ImageError(f"The data is not an image this runner reads (JPEG, PNG, WebP, GIF "
                         f"or BMP): {error}") from None
    if image.width < 1 or image.height < 1:
        raise ImageError("The image has no pixels.")
    return to_rgb(upright(image))


def upright(image: Image.Image) -> Image.Image:
    """The image turned as its EXIF orientation says (as it is where that cannot be read)."""
    try:
        return ImageOps.exif_transpose(image)
    except (OSError, SyntaxError, ValueError, KeyError, TypeError):
        return image


def blank(width: int, height: int) -> Image.Image:
    return Image.new("RGB", (width, height))


def to_rgb(image: Image.Image) -> Image.Image:
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def resize(image: Image.Image, height: int, width: int, filter: str) -> Image.Image:
    if (image.height, image.width) == (height, width):
        return image
    return image.resize((width, height), resample=RESAMPLE[filter])


def pixels(image: Image.Image, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0)) -> np.ndarray:
    """float32 (3, H, W): values / 255, then (x - mean) / std per channel, rounded where
    transformers' rescale and normalize round (the product in float64, the rest float32)."""
    planes = np.asarray(image, dtype=np.uint8).transpose(2, 0, 1)          # (3, H, W)
    scaled = (planes.astype(np.float64) * (1 / 255)).astype(np.float32)
    mean = np.asarray(mean, np.float32)[:, None, None]
    std = np.asarray(std, np.float32)[:, None, None]
    return (scaled - mean) / std
