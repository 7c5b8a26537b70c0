"""Qwen2-VL's and Qwen2.5-VL's vision towers -> llama.cpp's qwen2vl_merger and
qwen2.5vl_merger mmproj files (its converter's names and keys): the fused QKV split into
attn_q/k/v, the Conv3D patch kernel split into its two time slices (v.patch_embd.weight
and .weight.1), Qwen2.5-VL's full-attention blocks as n_wa_pattern.

Beyond llama.cpp's keys, the file records what its clip hard-codes: the window size and the
processor's min and max pixels (the max at most 1280 merged cells, the model card's
suggestion; the reference processor's 16384 would need gigabytes of attention scores).
"""

from __future__ import annotations

import re

import gguf
import numpy as np

from ..models.vision.images import CLIP_MEAN, CLIP_STD
from ..models.vision.qwen_vl import DEFAULT_WINDOW, MAX_PIXELS, MIN_PIXELS
from .checkpoint import Checkpoint, CheckpointError

VISION = gguf.Keys.ClipVision
PREFIXES = ("model.visual.", "visual.")
BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)\.(weight|bias)$")
BLOCK_NAMES = {"norm1": "ln1", "norm2": "ln2", "attn.proj": "attn_out",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
               "mlp.fc1": "ffn_up", "mlp.fc2": "ffn_down"}
NAMES = {"merger.ln_q": "v.post_ln", "merger.mlp.0": "mm.0", "merger.mlp.2": "mm.2"}
EPS = 1e-6                               # the reference's norms in the tower and merger


def vision_settings(checkpoint: Checkpoint) -> dict:
    """The tower's config.json settings under the names llama.cpp's converter reads."""
    vision = dict(checkpoint.config["vision_config"])
    if "embed_dim" in vision:            # Qwen2-VL: embed_dim is the width, hidden_size the output
        vision["intermediate_size"] = vision["embed_dim"] * vision.get("mlp_ratio", 4)
        vision["hidden_size"] = vision["embed_dim"]
    if vision.get("temporal_patch_size", 2) != 2:
        raise CheckpointError("Only a temporal patch of 2 frames is supported (as llama.cpp).")
    return vision


def processor_pixels(processor: dict) -> tuple[int, int]:
    size = processor.get("size") or {}
    least = int(processor.get("min_pixels") or size.get("shortest_edge") or MIN_PIXELS)
    most = int(processor.get("max_pixels") or size.get("longest_edge") or MAX_PIXELS)
    return least, min(most, MAX_PIXELS)


def write_hparams(writer: gguf.GGUFWriter, checkpoint: Checkpoint, processor: dict) -> None:
    config, vision = checkpoint.config, vision_settings(checkpoint)
    activation = vision.get("hidden_act", "quick_gelu")
    if activation == "silu":
        writer.add_bool(VISION.USE_SILU, True)
    elif activation != "quick_gelu":
        raise CheckpointError(f"A Qwen-VL tower with {activation} activations is not supported.")
    writer.add_bool(gguf.Keys.Clip.HAS_VISION_ENCODER, True)
    text = config.get("text_config") or config
    for key, value in ((VISION.IMAGE_SIZE, vision.get("image_size", 560)),
                       (VISION.PATCH_SIZE, vision["patch_size"]),
                       (VISION.EMBEDDING_LENGTH, vision["hidden_size"]),
                       (VISION.FEED_FORWARD_LENGTH, vision["intermediate_size"]),
                       (VISION.BLOCK_COUNT, vision["depth"]),
                       (VISION.PROJECTION_DIM, text["hidden_size"]),
                       (VISION.Attention.HEAD_COUNT, vision["num_heads"]),
                       (VISION.SPATIAL_MERGE_SIZE, vision.get("spatial_merge_size", 2))):
        writer.add_uint32(key, int(value))
    writer.add_float32(VISION.Attention.LAYERNORM_EPS, EPS)
    writer.add_array(VISION.IMAGE_MEAN, [float(x) for x in processor.get("image_mean", CLIP_MEAN)])
    writer.add_array(VISION.IMAGE_STD, [float(x) for x in processor.get("image_std", CLIP_STD)])
    least, most = processor_pixels(processor)
    writer.add_uint32(VISION.IMAGE_MIN_PIXELS, least)
    writer.add_uint32(VISION.IMAGE_MAX_PIXELS, most)
    full = vision.get("fullatt_block_indexes")
    if full:                             # Qwen2.5-VL: windows but every pattern-th block
        pattern = full[0] + 1
        if any(b - a != pattern for a, b in zip(full, full[1:])):
            raise CheckpointError(f"Full-attention blocks {full} are not evenly spaced, which "
                                  "llama.cpp's qwen2.5vl_merger needs.")
        writer.add_uint32(VISION.N_WA_PATTERN, pattern)
        writer.add_uint32(VISION.WINDOW_SIZE, int(vision.get("window_size", DEFAULT_WINDOW)))


def plan(checkpoint: Checkpoint) -> dict:
    """GGUF name -> (shape, load) for the tower's tensors."""
    found = {}
    for entry in checkpoint.tensors.values():
        prefix = next((p for p in PREFIXES if entry.name.startswith(p)), None)
        if prefix is None:
            continue
        name = entry.name[len(prefix):]
        for gguf_name, shape, load in _pieces(name, entry):
            found[gguf_name] = (shape, load)
    if not found:
        raise CheckpointError("The checkpoint has no vision tower tensors (visual.*).")
    return found


def _pieces(name: str, entry):
    """The GGUF tensors one checkpoint tensor becomes."""
    shape = tuple(entry.shape)
    if name == "patch_embed.proj.weight":                 # (D, 3, 2, p, p): two kernels
        kernel = (shape[0], shape[1], *shape[3:])
        for t, suffix in enumerate(("", ".1")):
            yield (f"v.patch_embd.weight{suffix}", kernel,
                   lambda t=t: np.ascontiguousarray(entry.load()[:, :, t]))
        return
    block = BLOCK.match(name)
    if block:
        i, part, kind = block.groups()
        if part == "attn.qkv":                            # (3D, ...) -> three (D, ...)
            third = shape[0] // 3
            for j, letter in enumerate("qkv"):
                yield (f"v.blk.{i}.attn_{letter}.{kind}", (third, *shape[1:]),
                       lambda j=j: np.ascontiguousarray(entry.load()[j * third:(j + 1) * third]))
            return
        if part in BLOCK_NAMES:
            yield f"v.blk.{i}.{BLOCK_NAMES[part]}.{kind}", shape, entry.load
            return
    stem, _, kind = name.rpartition(".")
    if stem in NAMES:
        yield f"{NAMES[stem]}.{kind}", shape, entry.load
        return
    raise CheckpointError(f"The tensor {entry.name} has no mmproj name.")
