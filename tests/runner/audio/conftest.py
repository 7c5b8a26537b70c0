"""The tiny Gemma 4 with audio, made once per session, converted to a model GGUF and an
mmproj GGUF holding both towers (f32, for exact comparisons), and its reference model."""

from __future__ import annotations

import pytest

from runner.convert import convert

from tests.support import hf_audio

from ..vision.conftest import vision_models  # noqa: F401  (a vision-only projector)


@pytest.fixture(scope="session")
def audio_model(tmp_path_factory):
    """{"hf": dir, "model": GGUF, "mmproj": GGUF}"""
    directory = tmp_path_factory.mktemp("gemma4-audio")
    hf = hf_audio.gemma4(directory / "hf")
    model = convert(hf, directory / "model.gguf", "f32", progress=False,
                    mmproj=directory / "mmproj.gguf")
    return {"hf": hf, "model": model, "mmproj": directory / "mmproj.gguf"}


@pytest.fixture(scope="session")
def audio_reference(audio_model):
    from tests.support import hf_vision

    return hf_vision.reference_model(audio_model["hf"])


@pytest.fixture(scope="session")
def loaded(audio_model):
    import runner

    model = runner.load(audio_model["model"], projector=audio_model["mmproj"], threads=2,
                        num_ctx=2048, batch_size=512, kv_cache_type="f32")
    yield model
    model.close()
