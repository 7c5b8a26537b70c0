"""gpt-oss checkpoints as llama.cpp's converter writes them: each layer's experts (as
transformers holds them: gate and up interleaved in one (experts, embd, 2 ffn) tensor,
down as (experts, ffn, embd), and their biases) become ffn_gate_exps, ffn_up_exps and
ffn_down_exps, (experts, out, in) with (experts, out) biases; the sinks become
attn_sinks.weight.

The released checkpoints hold the experts in MXFP4: per 32 weights of a row a power-of-two
scale byte (`_scales`, E8M0) and 16 bytes of 4-bit E2M1 values (`_blocks`, two values a
byte, in order). They pass through without a round trip to float, as ggml's MXFP4 blocks
(the scale byte, then value j in the low and value j + 16 in the high nibble of byte j),
rows already (experts, out, in)."""

from __future__ import annotations

import re

import gguf
import numpy as np

from .checkpoint import CheckpointError, TensorEntry
from .hyper import Hyper

EXPERTS = re.compile(r"layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj|gate_proj|up_proj)"
                     r"(_bias|_mxfp4)?$")
MXFP4 = gguf.GGMLQuantizationType.MXFP4
BLOCK = 32                       # weights per MXFP4 block (one scale byte, 16 value bytes)


def mxfp4_blocks(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """OpenAI's blocks (..., n, 16) uint8, two values a byte in order, and scales (..., n)
    -> ggml's MXFP4 rows (..., n * 17) uint8."""
    values = np.empty((*blocks.shape[:-1], BLOCK), np.uint8)
    values[..., 0::2], values[..., 1::2] = blocks & 0x0F, blocks >> 4
    packed = values[..., :16] | (values[..., 16:] << 4)
    return np.concatenate([scales[..., None], packed], axis=-1).reshape(
        *blocks.shape[:-2], -1)


def pair_mxfp4(checkpoint) -> None:
    """Each expert projection's _blocks and _scales as entries whose loaders give ggml's
    MXFP4 rows, shaped as the weights (experts, out, in): down_proj_mxfp4, and gate_up's
    alternating rows apart as gate_proj_mxfp4 and up_proj_mxfp4 (each packs its own rows)."""
    for name in [n for n in checkpoint.tensors if n.endswith("_blocks")]:
        base = name.removesuffix("_blocks")
        blocks, scales = checkpoint.tensors.pop(name), checkpoint.tensors.pop(base + "_scales",
                                                                              None)
        if scales is None or blocks.shape[:-1] != scales.shape or blocks.shape[-1] != 16:
            raise CheckpointError(f"The MXFP4 tensor {base} lacks its scales or they do not "
                                  "match its blocks.")
        experts, rows, groups, _ = blocks.shape
        parts = {base: slice(None)}
        if base.endswith("gate_up_proj"):
            rows //= 2
            parts = {base.replace("gate_up_proj", "gate_proj"): slice(0, None, 2),
                     base.replace("gate_up_proj", "up_proj"): slice(1, None, 2)}
        for part, chosen in parts.items():
            def load(blocks: TensorEntry = blocks, scales: TensorEntry = scales,
                     chosen: slice = chosen) -> np.ndarray:
                return mxfp4_blocks(blocks.load()[:, chosen], scales.load()[:, chosen])

            checkpoint.tensors[part + "_mxfp4"] = TensorEntry(
                part + "_mxfp4", (experts, rows, groups * BLOCK), load)


def gpt_oss_split(entry, config: dict) -> dict | None:
    found = EXPERTS.search(entry.name)
    if found is None:
        return None
    layer, kind, suffix = found.groups()
    prefix = f"blk.{layer}."
    if suffix == "_mxfp4":                               # (X, out, in), rows of blocks
        gguf_name = f"ffn_{kind.removesuffix('_proj')}_exps.weight"
        return {prefix + gguf_name: (entry.shape, entry.load, MXFP4)}
    if kind == "down_proj":
        if suffix == "_bias":
            return {prefix + "ffn_down_exps.bias": (entry.shape, entry.load)}
        experts, ffn, embd = entry.shape
        return {prefix + "ffn_down_exps.weight": (
            (experts, embd, ffn), lambda: np.ascontiguousarray(entry.load().transpose(0, 2, 1)))}
    if suffix == "_bias":                                  # (X, 2F), gate and up alternating
        experts, both = entry.shape
        half: tuple[int, ...] = (experts, both // 2)
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
