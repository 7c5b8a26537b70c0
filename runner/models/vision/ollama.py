"""Ollama's single-file vision models: the vision tower inside the model's GGUF, under
<arch>.vision.* keys and Ollama's tensor names. A name map per family reads such a file as
the mmproj it would be (clip.* keys, llama.cpp's names), so one projector class serves both.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import gguf

VISION = gguf.Keys.ClipVision
# <arch>.vision.<key> -> clip.vision.<key>
SHARED_KEYS = ("embedding_length", "feed_forward_length", "block_count",
               "attention.head_count", "attention.layer_norm_epsilon", "image_size",
               "patch_size", "projector.scale_factor",
               "image_max_tokens")          # ours (Gemma 4's soft-token budget), if present


@dataclass(frozen=True)
class OllamaLayout:
    projector: str                                   # the mmproj projector type it reads as
    renames: list[tuple[str, str]] = field(default_factory=list)   # regex, replacement
    mean: tuple[float, ...] = (0.5, 0.5, 0.5)
    std: tuple[float, ...] = (0.5, 0.5, 0.5)


LAYOUTS = {
    "gemma3": OllamaLayout("gemma3", [
        (r"^v\.patch_embedding\.", "v.patch_embd."),
        (r"^v\.position_embedding\.", "v.position_embd."),
        (r"^v\.post_layernorm\.", "v.post_ln."),
        (r"^(v\.blk\.\d+)\.attn_output\.", r"\1.attn_out."),
        (r"^(v\.blk\.\d+)\.layer_norm1\.", r"\1.ln1."),
        (r"^(v\.blk\.\d+)\.layer_norm2\.", r"\1.ln2."),
        (r"^(v\.blk\.\d+)\.mlp\.fc1\.", r"\1.ffn_up."),
        (r"^(v\.blk\.\d+)\.mlp\.fc2\.", r"\1.ffn_down."),
        (r"^mm\.mm_soft_emb_norm\.", "mm.soft_emb_norm."),
        (r"^mm\.mm_input_projection\.", "mm.input_projection.")]),
    "gemma4": OllamaLayout("gemma4v", mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0)),
}


def has_vision(meta: dict) -> bool:
    arch = meta.get("general.architecture")
    return f"{arch}.vision.block_count" in meta


def as_mmproj(meta: dict, names) -> tuple[dict, dict[str, str]]:
    """(the clip.* metadata, {mmproj name: the file's name}) of a single-file model."""
    arch = meta.get("general.architecture")
    layout = LAYOUTS.get(arch)
    if layout is None:
        raise ValueError(f"This {arch} file holds a vision tower in a layout this runner "
                         f"does not read (it reads {', '.join(LAYOUTS)}).")
    clip = {"general.architecture": "clip", gguf.Keys.Clip.HAS_VISION_ENCODER: True,
            gguf.Keys.Clip.PROJECTOR_TYPE: layout.projector, VISION.USE_GELU: True,
            VISION.PROJECTION_DIM: meta[f"{arch}.embedding_length"],
            VISION.IMAGE_MEAN: list(layout.mean), VISION.IMAGE_STD: list(layout.std)}
    for key in SHARED_KEYS:
        if f"{arch}.vision.{key}" in meta:
            clip[f"clip.vision.{key}"] = meta[f"{arch}.vision.{key}"]
    tokens = meta.get(f"{arch}.mm_tokens_per_image")
    if tokens and VISION.Projector.SCALE_FACTOR not in clip:        # Gemma 3's pool
        side = clip[VISION.IMAGE_SIZE] // clip[VISION.PATCH_SIZE]
        clip[VISION.Projector.SCALE_FACTOR] = side // math.isqrt(int(tokens))
    aliases = {}
    for name in names:
        if not name.startswith(("v.", "mm.")):
            continue
        renamed = name
        for pattern, replacement in layout.renames:
            renamed = re.sub(pattern, replacement, renamed)
        aliases[renamed] = name
    return clip, aliases
