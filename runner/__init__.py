"""The runner: models, KV caches, tokenizers, samplers and the batch loop over pyggml.

Its modules arrive with the text-generation issue; this package is installed alongside pyggml
so that `python -m runner` has a home.
"""
