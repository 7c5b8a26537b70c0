"""Ollama's single-file multimodal models: the vision tower (and Gemma 4's audio tower)
inside the model's GGUF, under <arch>.vision.* / <arch>.audio.* keys and Ollama's tensor
names. A name map per family reads such a file as the mmproj it would be (clip.* keys,
llama.cpp's names), so one projector class serves both.

Gemma 4's audio names differ from llama.cpp's in six places (AUDIO_NAMES, as Ollama's
converter writes them by the reference's account; no Ollama blob was at hand to check).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import gguf

from .images import CLIP_MEAN, CLIP_STD
from .qwen_vl import FULL_BLOCKS

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
    keys: dict = field(default_factory=dict)         # clip keys it implies (the file's win)
    arch_keys: dict[str, str] = field(default_factory=dict)   # <arch>.<key> -> clip key
    borrowed: dict[str, str] = field(default_factory=dict)    # mmproj name -> the text's
    token_keys: dict[str, str] = field(default_factory=dict)  # clip key -> a token's text


# ours: Q and K rows with each head's rotated pairs split into halves (the reference's
# layout, as Ollama stores Pixtral's), where llama.cpp's files have them adjacent
HALVES = "clip.vision.rotary_halves"
# ours: the token whose text-model embedding a projector takes (Pixtral's [IMG_BREAK]) where
# the file has no row of its own but the text model's whole table
IMG_BREAK_TOKEN = "clip.vision.img_break_token"


QWEN35 = OllamaLayout("qwen3vl_merger", [
    (r"^v\.patch_embed\.", "v.patch_embd."),
    (r"^v\.pos_embed\.", "v.position_embd."),
    (r"^(v\.blk\.\d+)\.norm([12])\.", r"\1.ln\2."),
    (r"^(v\.blk\.\d+)\.mlp\.linear_fc1\.", r"\1.ffn_up."),
    (r"^(v\.blk\.\d+)\.mlp\.linear_fc2\.", r"\1.ffn_down."),
    (r"^v\.merger\.norm\.", "v.post_ln."),
    (r"^v\.merger\.linear_fc1\.", "mm.0."),
    (r"^v\.merger\.linear_fc2\.", "mm.2.")],
    # Ollama's files say neither the epsilon nor the image size (the position table does)
    keys={VISION.Attention.LAYERNORM_EPS: 1e-6, VISION.IMAGE_SIZE: 768},
    arch_keys={"vision.spatial_merge_size": VISION.SPATIAL_MERGE_SIZE,
               "vision.shortest_edge": VISION.IMAGE_MIN_PIXELS,
               "vision.image_mean": VISION.IMAGE_MEAN, "vision.image_std": VISION.IMAGE_STD})


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
    "mistral3": OllamaLayout("pixtral", [
        (r"^v\.patch_conv\.", "v.patch_embd."),
        (r"^v\.encoder_norm\.", "v.pre_ln."),
        (r"^(v\.blk\.\d+)\.attn_norm\.", r"\1.ln1."),
        (r"^(v\.blk\.\d+)\.attn_output\.", r"\1.attn_out."),
        (r"^(v\.blk\.\d+)\.ffn_norm\.", r"\1.ln2."),
        (r"^mm\.norm\.", "mm.input_norm."),
        (r"^mm\.patch_merger\.merging_layer\.", "mm.patch_merger."),
        (r"^mm\.linear_([12])\.", r"mm.\1.")],
        mean=CLIP_MEAN, std=CLIP_STD,
        keys={VISION.USE_GELU: False, VISION.USE_SILU: True, HALVES: True,
              VISION.Attention.LAYERNORM_EPS: 1e-5},
        arch_keys={"spatial_merge_size": VISION.SPATIAL_MERGE_SIZE},
        borrowed={"v.token_embd.img_break": "token_embd.weight"},
        token_keys={IMG_BREAK_TOKEN: "[IMG_BREAK]"}),
    "qwen25vl": OllamaLayout("qwen2.5vl_merger", [
        (r"^v\.patch_embd_0\.weight$", "v.patch_embd.weight"),
        (r"^v\.patch_embd_1\.weight$", "v.patch_embd.weight.1"),
        (r"^v\.merger\.ln_q\.", "v.post_ln."),
        (r"^v\.merger\.mlp\.([02])\.", r"mm.\1.")],
        mean=CLIP_MEAN, std=CLIP_STD,
        keys={VISION.USE_GELU: False, VISION.USE_SILU: True, VISION.IMAGE_SIZE: 560},
        arch_keys={"vision.spatial_merge_size": VISION.SPATIAL_MERGE_SIZE,
                   "vision.window_size": VISION.WINDOW_SIZE,
                   "vision.max_pixels": VISION.IMAGE_MAX_PIXELS,
                   "vision.fullatt_block_indexes": FULL_BLOCKS}),
    # Qwen 3.5 (Ollama converts it as Qwen3-Next, with Qwen3-VL's tower): Q, K and V split,
    # the Conv3D patch kernel whole (its two time slices inside; qwen_vl.py reads it so)
    "qwen35": QWEN35,
    "qwen35moe": QWEN35,
}


AUDIO = gguf.Keys.ClipAudio
AUDIO_KEYS = ("embedding_length", "feed_forward_length", "block_count", "attention.head_count",
              "attention.layer_norm_epsilon", "num_mel_bins")
# Ollama's Gemma 4 audio name -> llama.cpp's (one lookup each: ln2 and layer_pre_norm swap)
AUDIO_NAMES = {"ln1": "attn_pre_norm", "ln2": "attn_post_norm", "layer_pre_norm": "ln2",
               "linear_pos": "attn_k_rel"}
AUDIO_TOP = {"mm.a.fc.": "a.pre_encode.out.", "a.pre_encode.out.": "a.input_projection."}
AUDIO_BLOCK = re.compile(r"^(a\.blk\.\d+\.)([a-z_0-9]+)(\..+)$")


def has_vision(meta: dict) -> bool:
    arch = meta.get("general.architecture")
    return f"{arch}.vision.block_count" in meta


def unread_tower(meta: dict) -> str | None:
    """Why a single file's images cannot be read (its tower's layout is not one this runner
    reads: its text still runs), or None."""
    arch = meta.get("general.architecture")
    if not has_vision(meta) or arch in LAYOUTS:
        return None
    return (f"This {arch} file's vision tower is in a layout this runner does not read yet "
            f"(it reads {', '.join(LAYOUTS)}'s); the model runs text only.")


def has_audio(meta: dict) -> bool:
    arch = meta.get("general.architecture")
    return f"{arch}.audio.block_count" in meta


def as_mmproj(meta: dict, names) -> tuple[dict, dict[str, str]]:
    """(the clip.* metadata, {mmproj name: the file's name}) of a single-file model."""
    names = list(names)
    clip: dict = {"general.architecture": "clip"}
    aliases: dict[str, str] = {}
    if has_vision(meta):
        clip, aliases = _vision(meta, names)
    if has_audio(meta):
        clip.update(_audio_keys(meta))
        aliases.update({_audio_name(name): name for name in names
                        if name.startswith(("a.", "mm.a."))})
    return clip, aliases


def _audio_keys(meta: dict) -> dict:
    arch = meta.get("general.architecture")
    if arch != "gemma4":
        raise ValueError(f"This {arch} file holds an audio tower in a layout this runner does "
                         "not read (it reads gemma4's).")
    clip = {gguf.Keys.Clip.HAS_AUDIO_ENCODER: True, AUDIO.PROJECTOR_TYPE: "gemma4a",
            AUDIO.PROJECTION_DIM: meta[f"{arch}.embedding_length"]}
    for key in AUDIO_KEYS:
        if f"{arch}.audio.{key}" in meta:
            clip[f"clip.audio.{key}"] = meta[f"{arch}.audio.{key}"]
    return clip


def _audio_name(name: str) -> str:
    found = AUDIO_BLOCK.match(name)
    if found and found.group(2) in AUDIO_NAMES:
        return found.group(1) + AUDIO_NAMES[found.group(2)] + found.group(3)
    for theirs, ours in AUDIO_TOP.items():
        if name.startswith(theirs):
            return ours + name[len(theirs):]
    return name


def _vision(meta: dict, names) -> tuple[dict, dict[str, str]]:
    arch = meta.get("general.architecture")
    layout = LAYOUTS.get(arch) if isinstance(arch, str) else None
    if layout is None:
        raise ValueError(f"This {arch} file holds a vision tower in a layout this runner "
                         f"does not read (it reads {', '.join(LAYOUTS)}).")
    clip = {"general.architecture": "clip", gguf.Keys.Clip.HAS_VISION_ENCODER: True,
            VISION.PROJECTOR_TYPE: layout.projector, VISION.USE_GELU: True,
            VISION.PROJECTION_DIM: meta[f"{arch}.embedding_length"],
            VISION.IMAGE_MEAN: list(layout.mean), VISION.IMAGE_STD: list(layout.std),
            **layout.keys}
    for key in SHARED_KEYS:
        if f"{arch}.vision.{key}" in meta:
            clip[f"clip.vision.{key}"] = meta[f"{arch}.vision.{key}"]
    for key, clip_key in layout.arch_keys.items():
        if f"{arch}.{key}" in meta:
            clip[clip_key] = meta[f"{arch}.{key}"]
    vocab = list(meta.get("tokenizer.ggml.tokens") or [])
    for clip_key, text in layout.token_keys.items():
        if text not in vocab:
            raise ValueError(f"This {arch} file's vocabulary has no {text} token, which its "
                             "vision layout needs.")
        clip[clip_key] = vocab.index(text)
    tokens = meta.get(f"{arch}.mm_tokens_per_image")
    if tokens and VISION.Projector.SCALE_FACTOR not in clip:        # Gemma 3's pool
        side = clip[VISION.IMAGE_SIZE] // clip[VISION.PATCH_SIZE]
        clip[VISION.Projector.SCALE_FACTOR] = side // math.isqrt(int(tokens))
    aliases = {}
    for name in names:
        if not name.startswith(("v.", "mm.")) or name.startswith("mm.a."):
            continue
        renamed = name
        for pattern, replacement in layout.renames:
            renamed = re.sub(pattern, replacement, renamed)
        aliases[renamed] = name
    aliases.update((ours, theirs) for ours, theirs in layout.borrowed.items() if theirs in names)
    return clip, aliases
