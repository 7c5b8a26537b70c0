"""StarCoder2 checkpoints (Starcoder2ForCausalLM) as llama.cpp's converter writes them: the
common keys and the LayerNorms' epsilon; the tensors under their usual names (the FFN's
c_fc and c_proj as ffn_up and ffn_down), nothing permuted. llama.cpp's starcoder2 needs
every bias and computes GELU's tanh form, so a checkpoint without biases or with another
activation is refused. The sliding window transformers applies is not written: llama.cpp
attends to the whole context."""

from __future__ import annotations

import gguf

from .checkpoint import CheckpointError
from .hyper import Hyper

TANH_GELUS = ("gelu_pytorch_tanh", "gelu_new")


def starcoder2_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    if not config.get("use_bias", True):
        raise CheckpointError("StarCoder2 without biases is not supported (llama.cpp's "
                              "starcoder2 requires them).")
    activation = config.get("hidden_act", TANH_GELUS[0])
    if activation not in TANH_GELUS:
        raise CheckpointError(f"StarCoder2 with {activation} is not supported (llama.cpp's "
                              "starcoder2 computes GELU's tanh form).")
    writer.add_layer_norm_eps(float(config.get("norm_epsilon", 1e-5)))
