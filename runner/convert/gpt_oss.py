"""gpt-oss checkpoints as llama.cpp's converter writes them: each layer's experts (as
transformers holds them: gate and up interleaved in one (experts, embd, 2 ffn) tensor,
down as (experts, ffn, embd), and their biases) become ffn_gate_exps, ffn_up_exps and
ffn_down_exps, (experts, out, in) with (experts, out) biases; the sinks become
attn_sinks.weight."""

from __future__ import annotations

import re

import gguf
import numpy as np

from .checkpoint import CheckpointError
from .hyper import Hyper

EXPERTS = re.compile(r"layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)(_bias|_blocks|"
                     r"_scales)?$")


def gpt_oss_split(entry, config: dict) -> dict | None:
    found = EXPERTS.search(entry.name)
    if found is None:
        return None
    layer, kind, suffix = found.groups()
    if suffix in ("_blocks", "_scales"):
        raise CheckpointError("This gpt-oss checkpoint holds its experts in MXFP4 blocks; "
                              "the converter reads them as transformers saves them after "
                              "dequantizing (Mxfp4Config(dequantize=True)).")
    prefix = f"blk.{layer}."
    if kind == "down_proj":
        if suffix == "_bias":
            return {prefix + "ffn_down_exps.bias": (entry.shape, entry.load)}
        experts, ffn, embd = entry.shape
        return {prefix + "ffn_down_exps.weight": (
            (experts, embd, ffn), lambda: np.ascontiguousarray(entry.load().transpose(0, 2, 1)))}
    if suffix == "_bias":                                  # (X, 2F), gate and up alternating
        experts, both = entry.shape
        half = (experts, both // 2)
        return {prefix + "ffn_gate_exps.bias": (half, lambda: entry.load()[:, 0::2].copy()),
                prefix + "ffn_up_exps.bias": (half, lambda: entry.load()[:, 1::2].copy())}
    experts, embd, both = entry.shape                      # (X, E, 2F)
    half = (experts, both // 2, embd)

    def rows(start: int):
        return lambda: np.ascontiguousarray(entry.load()[:, :, start::2].transpose(0, 2, 1))

    return {prefix + "ffn_gate_exps.weight": (half, rows(0)),
            prefix + "ffn_up_exps.weight": (half, rows(1))}


def gpt_oss_hparams(writer: gguf.GGUFWriter, config: dict, h: Hyper, directory) -> None:
    """The window and the experts; the window on the even layers only, as llama.cpp fixes
    it (and as the released configs' layer_types say)."""
    pattern = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(h.layers)]
    if config.get("layer_types", pattern) != pattern:
        raise CheckpointError("This gpt-oss's layer pattern is not every other layer sliding "
                              "(the even ones), the only one llama.cpp's gpt-oss knows.")
    if (config.get("swiglu_alpha", 1.702), config.get("swiglu_limit", 7.0)) != (1.702, 7.0):
        raise CheckpointError("This gpt-oss's SwiGLU has another alpha or limit than 1.702 and "
                              "7.0, the ones llama.cpp's gpt-oss fixes.")
    writer.add_sliding_window(int(config["sliding_window"]))
    writer.add_expert_count(int(config["num_local_experts"]))
    writer.add_expert_used_count(int(config["num_experts_per_tok"]))
    writer.add_expert_feed_forward_length(int(config["intermediate_size"]))
