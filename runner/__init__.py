"""The runner: models, KV caches, tokenizers, samplers and generation over pyggml.

    import runner
    model = runner.load("smollm2:135m")
    print(model.generate("The capital of France is", stream=False, temperature=0,
                         num_predict=16))
"""

from .api import LoadOptions, Model, load

__all__ = ["LoadOptions", "Model", "load"]
