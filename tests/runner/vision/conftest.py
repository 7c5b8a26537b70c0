"""Tiny multimodal checkpoints, made once per session, converted to a model GGUF and an
mmproj GGUF (f32, for exact comparisons)."""

from __future__ import annotations

import pytest

from runner.convert import convert

from tests.support import hf_vision

BUILDERS = {"gemma3": hf_vision.gemma3, "llava": hf_vision.llava, "gemma4": hf_vision.gemma4,
            "mistral3": hf_vision.mistral3, "pixtral": hf_vision.pixtral,
            "qwen2_5_vl": hf_vision.qwen2_5_vl, "qwen2_vl": hf_vision.qwen2_vl,
            "qwen3_vl": hf_vision.qwen3_vl, "qwen3_vl_moe": hf_vision.qwen3_vl_moe,
            "qwen3_5": hf_vision.qwen3_5}


@pytest.fixture(scope="session")
def vision_models(tmp_path_factory):
    """vision_models(kind) -> {"hf": dir, "model": GGUF, "mmproj": GGUF}."""
    cache = {}

    def get(kind):
        if kind not in cache:
            directory = tmp_path_factory.mktemp(f"{kind}-vision")
            hf = BUILDERS[kind](directory / "hf")
            model = convert(hf, directory / "model.gguf", "f32", progress=False,
                            mmproj=directory / "mmproj.gguf")
            cache[kind] = {"hf": hf, "model": model, "mmproj": directory / "mmproj.gguf"}
        return cache[kind]

    return get


@pytest.fixture(scope="session")
def reference(vision_models):
    """reference(kind): the transformers model of that checkpoint (loaded once)."""
    cache = {}

    def get(kind):
        if kind not in cache:
            cache[kind] = hf_vision.reference_model(vision_models(kind)["hf"])
        return cache[kind]

    return get
