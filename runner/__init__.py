"""The runner: models, KV caches, tokenizers, samplers and generation over pyggml.

    import runner
    model = runner.load("smollm2:135m")
    print(model.generate("The capital of France is", stream=False, temperature=0,
                         num_predict=16))

The Python API (api.py) is imported on first use, so that a process that never computes
(the Ollama/OpenAI server, which drives runner subprocesses) does not load ggml.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .api import LoadOptions, Model, load

__all__ = ["LoadOptions", "Model", "load"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module(".api", __name__), name)
    try:                                 # a submodule reached as an attribute: runner.api
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as missing:
        if missing.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
