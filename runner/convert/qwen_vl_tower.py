"""Qwen-VL vision towers -> llama.cpp's mmproj files (its converter's names and keys):
Qwen2-VL's and Qwen2.5-VL's (qwen2vl_merger, qwen2.5vl_merger) with the fused QKV split
into attn_q/k/v, Qwen3-VL's (qwen3vl_merger) with it kept whole and its deepstack mergers
as v.deepstack.N (N the block they follow); the Conv3D patch kernel split into its two time
slices (v.patch_embd.weight and .weight.1); Qwen2.5-VL's full-attention blocks as
n_wa_pattern.

Beyond llama.cpp's keys, the file records what its clip hard-codes: the window size and the
processor's min and max pixels (the max at most MAX_CELLS merged cells, the model card's
suggestion; the reference processor's 16384 would need gigabytes of attention scores).
"""

from __future__ import annotations

import re

import gguf
import numpy as np

from ..models.vision.images import CLIP_MEAN, CLIP_STD
from ..models.vision.qwen_vl import DEFAULT_MERGE, DEFAULT_WINDOW, default_pixels
from .checkpoint import Checkpoint, CheckpointError

VISION = gguf.Keys.ClipVision
PREFIXES = ("model.visual.", "visual.")
BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)\.(weight|bias)$")
DEEPSTACK = re.compile(r"^deepstack_merger_list\.(\d+)\.(norm|linear_fc1|linear_fc2)\."
                       r"(weight|bias)$")
BLOCK_NAMES = {"norm1": "ln1", "norm2": "ln2", "attn.proj": "attn_out",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
               "mlp.fc1": "ffn_up", "mlp.fc2": "ffn_down",
               "mlp.linear_fc1": "ffn_up", "mlp.linear_fc2": "ffn_down", "attn.qkv": "attn_qkv"}
NAMES = {"merger.ln_q": "v.post_ln", "merger.mlp.0": "mm.0", "merger.mlp.2": "mm.2",
         "merger.norm": "v.post_ln", "merger.linear_fc1": "mm.0", "merger.linear_fc2": "mm.2",
         "patch_embed.proj": "v.patch_embd", "pos_embed": "v.position_embd"}
DEEPSTACK_NAMES = {"norm": "norm", "linear_fc1": "fc1", "linear_fc2": "fc2"}
# the tower's MLP activation -> the key saying it (quick GELU: none)
ACTIVATIONS = {"quick_gelu": None, "silu": VISION.USE_SILU, "gelu_pytorch_tanh": VISION.USE_GELU}
EPS = 1e-6                               # the reference's norms in the tower and merger
# Qwen3-VL's tower without its deepstack mergers (llama.cpp writes them as qwen3vl_merger
# files whose blocks are none of them deepstack)
NO_DEEPSTACK = {"qwen3_5", "qwen3_5_moe"}


def deepstack_of(config: dict) -> list[int] | None:
    """Qwen3-VL's deepstack blocks ([] for Qwen 3.5's tower); None: a Qwen2-VL or Qwen2.5-VL
    tower (whose QKV llama.cpp splits)."""
    if config.get("model_type") in NO_DEEPSTACK:
        return []
    return config["vision_config"].get("deepstack_visual_indexes")


def vision_settings(checkpoint: Checkpoint) -> dict:
    """The tower's config.json settings under the names llama.cpp's converter reads."""
    vision = dict(checkpoint.config["vision_config"])
    if "embed_dim" in vision:            # Qwen2-VL: embed_dim is the width, hidden_size the output
        vision["intermediate_size"] = vision["embed_dim"] * vision.get("mlp_ratio", 4)
        vision["hidden_size"] = vision["embed_dim"]
    if vision.get("temporal_patch_size", 2) != 2:
        raise CheckpointError("Only a temporal patch of 2 frames is supported (as llama.cpp).")
    return vision


def processor_pixels(processor: dict, vision: dict) -> tuple[int, int]:
    """The processor's least and most pixels, the most capped at MAX_CELLS cells."""
    size = processor.get("size") or {}
    least, cap = default_pixels(vision["patch_size"], vision.get("spatial_merge_size",
                                                                 DEFAULT_MERGE))
    least = int(processor.get("min_pixels") or size.get("shortest_edge") or least)
    most = int(processor.get("max_pixels") or size.get("longest_edge") or cap)
    return least, min(most, cap)


def write_hparams(writer: gguf.GGUFWriter, checkpoint: Checkpoint, processor: dict) -> None:
    config, vision = checkpoint.config, vision_settings(checkpoint)
    activation = vision.get("hidden_act", "quick_gelu")
    if activation not in ACTIVATIONS:
        raise CheckpointError(f"A Qwen-VL tower with {activation} activations is not supported.")
    key = ACTIVATIONS[activation]
    if key:
        writer.add_bool(key, True)
    writer.add_bool(gguf.Keys.Clip.HAS_VISION_ENCODER, True)
    text = config.get("text_config") or config
    positions = vision.get("num_position_embeddings")             # Qwen3-VL: a square table
    image_size = round(positions ** 0.5) * vision["patch_size"] if positions else 560
    for key, value in ((VISION.IMAGE_SIZE, vision.get("image_size", image_size)),
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
    least, most = processor_pixels(processor, vision)
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
    deepstack = deepstack_of(config)
    if deepstack is not None:            # Qwen3-VL, Qwen 3.5
        writer.add_array(VISION.IS_DEEPSTACK_LAYERS,
                         [i in deepstack for i in range(vision["depth"])])


def plan(checkpoint: Checkpoint) -> dict:
    """GGUF name -> (shape, load) for the tower's tensors."""
    found = {}
    deepstack = deepstack_of(checkpoint.config)
    for entry in checkpoint.tensors.values():
        prefix = next((p for p in PREFIXES if entry.name.startswith(p)), None)
        if prefix is None:
            continue
        name = entry.name[len(prefix):]
        for gguf_name, shape, load in _pieces(name, entry, deepstack):
            found[gguf_name] = (shape, load)
    if not found:
        raise CheckpointError("The checkpoint has no vision tower tensors (visual.*).")
    return found


def _pieces(name: str, entry, deepstack: list[int] | None):
    """The GGUF tensors one checkpoint tensor becomes; deepstack: Qwen3-VL's deepstack
    blocks (its QKV stays whole), None for Qwen2-VL's and Qwen2.5-VL's."""
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
        if part == "attn.qkv" and deepstack is None:      # (3D, ...) -> three (D, ...)
            third = shape[0] // 3
            for j, letter in enumerate("qkv"):
                yield (f"v.blk.{i}.attn_{letter}.{kind}", (third, *shape[1:]),
                       lambda j=j: np.ascontiguousarray(entry.load()[j * third:(j + 1) * third]))
            return
        if part in BLOCK_NAMES:
            yield f"v.blk.{i}.{BLOCK_NAMES[part]}.{kind}", shape, entry.load
            return
    merger = DEEPSTACK.match(name)
    if merger and deepstack is not None:
        n, part, kind = merger.groups()
        yield f"v.deepstack.{deepstack[int(n)]}.{DEEPSTACK_NAMES[part]}.{kind}", shape, entry.load
        return
    stem, _, kind = name.rpartition(".")
    if stem in NAMES:
        yield f"{NAMES[stem]}.{kind}", shape, entry.load
        return
    raise CheckpointError(f"The tensor {entry.name} has no mmproj name.")
