"""Each projector's rows for an image, against transformers' image features; the encoder's
cache and kept graph."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
from runner.loading.loader import open_model
from runner.models.vision import images, projector_class
from runner.multimodal.encoder import Encoder

from tests.support import hf_vision
from tests.support.architectures import PROJECTOR_OF
from tests.support.hf_vision import png

# Pixtral's and Mistral 3's reference towers take about 30 s each to compute here: heavy
KINDS = [pytest.param(kind, marks=pytest.mark.heavy) if kind in ("mistral3", "pixtral")
         else kind for kind in PROJECTOR_OF]


@pytest.fixture(scope="module")
def encoders(vision_models):
    made = {}

    def get(kind):
        if kind not in made:
            paths = vision_models(kind)
            loaded = open_model(paths["model"], projector=paths["mmproj"])
            cpu = pyggml.cpu_backend(threads=2)
            loaded.load_projector(cpu.device)
            made[kind] = Encoder(loaded.projectors["image"], pyggml.Scheduler([cpu]))
        return made[kind]

    yield get
    for encoder in made.values():
        encoder.close()


def close(ours: np.ndarray, expected: np.ndarray) -> None:
    assert ours.shape == expected.shape
    assert np.abs(ours - expected).max() <= 1e-4 * max(1.0, np.abs(expected).max())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("height,width", [(40, 56), (20, 12), (57, 31)])
def test_rows_are_the_reference_image_features(kind, height, width, encoders, reference):
    data = png(height * width, height, width)
    expected = hf_vision.features(reference(kind), hf_vision.processed(kind, data))
    encoder = encoders(kind)
    assert type(encoder.projector) is projector_class(PROJECTOR_OF[kind])
    pixels = encoder.projector.preprocess(images.decode(data))
    ours = encoder.encode(b"%d" % (height * width), pixels)
    close(without_breaks(ours, encoder.projector, pixels), expected)


def without_breaks(rows: np.ndarray, projector, pixels) -> np.ndarray:
    """Pixtral's rows less the [IMG_BREAK] embedding after each row of cells (the reference's
    image features have none; it is checked to be the text model's [IMG_BREAK] embedding)."""
    if not hasattr(projector, "img_break"):
        return rows
    cols = pixels.grid[1] // projector.merge
    breaks = rows[cols::cols + 1]
    assert len(breaks) == pixels.grid[0] // projector.merge - 1
    np.testing.assert_array_equal(breaks, np.broadcast_to(projector.img_break.numpy(),
                                                          breaks.shape))
    return np.delete(rows, np.s_[cols::cols + 1], axis=0)


@pytest.mark.parametrize("kind", KINDS)
def test_f16_projectors_encode_close_to_f32(kind, vision_models, encoders, tmp_path):
    """As converters usually write them: matrices and tables F16."""
    from runner.convert import convert

    hf = vision_models(kind)["hf"]
    convert(hf, tmp_path / "model.gguf", "f16", progress=False, mmproj=tmp_path / "mm.gguf")
    loaded = open_model(tmp_path / "model.gguf", projector=tmp_path / "mm.gguf")
    cpu = pyggml.cpu_backend(threads=2)
    loaded.load_projector(cpu.device)
    encoder = Encoder(loaded.projectors["image"], pyggml.Scheduler([cpu]))
    image = images.decode(png(31, 40, 56))
    try:
        half = encoder.encode(b"f16", loaded.projectors["image"].preprocess(image))
    finally:
        encoder.close()
        loaded.close()
    full = encoders(kind).encode(b"f32 of the f16 test", encoders(kind).projector.preprocess(
        image))
    assert np.abs(half - full).max() <= 3e-2 * max(1.0, np.abs(full).max())


def test_an_image_is_encoded_once_and_the_graph_kept(encoders):
    encoder = encoders("gemma3")
    pixels = encoder.projector.preprocess(images.decode(png(5, 30, 30)))
    before = encoder.encoded
    first = encoder.encode(b"same", pixels)
    graph = encoder._kept
    again = encoder.encode(b"same", pixels)
    assert encoder.encoded == before + 1 and again is first
    encoder.encode(b"other", encoder.projector.preprocess(images.decode(png(6, 30, 30))))
    assert encoder.encoded == before + 2 and encoder._kept is graph     # same shape


def test_the_output_cache_keeps_to_its_budget(encoders):
    encoder = encoders("gemma3")
    pixels = encoder.projector.preprocess(images.decode(png(7, 30, 30)))
    budget, encoder.cache_bytes = encoder.cache_bytes, 3 * 4 * 32 * 4   # three images' rows
    try:
        for n in range(5):
            encoder.encode(b"budget %d" % n, pixels)
        assert encoder.cached(b"budget 4") is not None and encoder.cached(b"budget 0") is None
        assert sum(rows.nbytes for rows in encoder._outputs.values()) <= encoder.cache_bytes
    finally:
        encoder.cache_bytes = budget


@pytest.mark.parametrize("kind", KINDS)
def test_flash_attention_encodes_close_to_plain(encoders, kind):
    """The fused kernel over F16 keys and values (llama.cpp's clip does the same)."""
    plain = encoders(kind)
    flash = Encoder(plain.projector, pyggml.Scheduler(list(plain.scheduler.backends)),
                    flash=True)
    try:
        image = png(13, 40, 56)
        pixels = plain.projector.preprocess(images.decode(image))
        expected = plain.encode(b"plain %d" % id(flash), pixels)
        ours = flash.encode(b"flash", pixels)
        assert np.abs(ours - expected).max() <= 2e-3 * max(1.0, np.abs(expected).max())
        assert flash._kept.graph.n_nodes != plain._kept.graph.n_nodes     # another graph
    finally:
        flash.close()
        flash.scheduler.close()
