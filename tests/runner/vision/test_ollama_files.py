"""Ollama's single-file vision models (the tower inside the model's GGUF, under its names and
<arch>.vision.* keys, as Ollama's converter writes them): written
here from a converted model and mmproj, then loaded without a projector, they give the same
image rows and logits as the pair."""

from __future__ import annotations

import numpy as np
import pytest

import runner

from tests.support.hf_vision import png
from tests.support.ollama_files import HALVES, RESHAPED, single_file

# Ollama's Qwen2.5-VL reads no least area from the file (56 x 56 pixels, as the reference's
# default): an image above it reads alike
IMAGE_SIZES = {"qwen2_5_vl": (48, 72)}


@pytest.mark.parametrize("family", ["gemma3", "gemma4", "mistral3", "qwen2_5_vl", "qwen3_5"])
def test_a_single_file_reads_as_the_model_and_its_projector(family, vision_models, tmp_path):
    paths = vision_models(family)
    path = single_file(paths["model"], paths["mmproj"], tmp_path / "single.gguf", family)
    options = dict(num_ctx=256, threads=2, kv_cache_type="f32")
    pair = runner.load(paths["model"], projector=paths["mmproj"], **options)
    single = runner.load(path, **options)
    try:
        assert single.multimodal is not None
        image = png(8, *IMAGE_SIZES.get(family, (40, 56)))
        ours = single.multimodal.media(image)[0].embedding()
        expected = pair.multimodal.media(image)[0].embedding()
        if family in HALVES or family in RESHAPED:   # Q and K multiplied in another row
            # order, Qwen 3.5's frames in one product where the pair sums two: ggml's tiled
            # matrix product may round them otherwise (measured 2e-8)
            assert np.abs(ours - expected).max() <= 1e-6 * np.abs(expected).max()
        else:
            assert np.array_equal(ours, expected)
        greedy = dict(temperature=0, num_predict=5, stream=False)
        assert single.generate("What is [img-0]?", images=[image], **greedy) == \
            pair.generate("What is [img-0]?", images=[image], **greedy)
    finally:
        pair.close()
        single.close()
