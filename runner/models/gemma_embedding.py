"""EmbeddingGemma (llama.cpp's gemma-embedding; Ollama's files say gemma3 and a pooling
type, and name the Dense layers dense.0 and dense.1): Gemma 3's text model made an encoder. Every
token sees the whole sequence on global layers and the tokens within half the window on
either side on sliding ones (the cache's mask for an encoder; transformers' bidirectional
window and llama.cpp's symmetric one), the final hidden states are pooled, and the
sentence-transformers Dense layers (dense_2, dense_3: 768 -> 3072 -> 768 in the released
model, no activation) follow.

The Dense layers are linear, so they commute with mean, CLS and last-token pooling: they
are applied to each output row in the graph (on the model's device, in the file's types),
and the engine pools what they give."""

from __future__ import annotations

from .contract import register
from .base import ModelError, Weights
from .gemma3 import Gemma3, Gemma3Config

# the Dense layers' names in llama.cpp's files and in Ollama's
DENSE_NAMES = (("dense_2.weight", "dense_3.weight"), ("dense.0.weight", "dense.1.weight"))


@register("gemma-embedding")
class GemmaEmbedding(Gemma3):
    causal = False

    @classmethod
    def config_of(cls, meta: dict):
        return Gemma3Config.from_metadata(meta, meta["general.architecture"])

    def __init__(self, config: Gemma3Config, weights: Weights):
        super().__init__(config, weights)
        self.dense = [weights.take(name) for names in DENSE_NAMES for name in names
                      if name in weights.tensors]                     # (out, in) each
        width = config.embd
        for layer in self.dense:
            if layer.shape[-1] != width:
                raise ModelError(f"The dense layer {layer.name} takes rows of "
                                 f"{layer.shape[-1]}, but the model gives {width}.")
            width = layer.shape[0]

    def project(self, x, inputs):
        if not inputs.embeddings:
            raise ModelError("EmbeddingGemma makes embeddings only; it has no language-model "
                             "head.")
        for layer in self.dense:
            x = layer.mul_mat(x)                                        # (n_out, out)
        return x

    def shift(self, k, deltas, layer: int):
        raise ModelError("EmbeddingGemma encodes each input whole; its cache does not shift.")


register("gemma3_embed")(GemmaEmbedding)
