"""A multimodal checkpoint's vision tower and projector (and Gemma 4's audio tower, through
audio_tower) -> an mmproj GGUF, as llama.cpp's
converter writes them (general.architecture "clip", clip.* keys, v.* and mm.* tensors), so
the files load in llama.cpp and the mmproj files people download load here.

Each supported checkpoint type has a VisionTower: its projector type, the keys it writes
from config.json, and how its tensors are named and changed. Tensor names go through
gguf-py's own table once the checkpoint's prefixes are made canonical.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import gguf
import numpy as np

from ..models.vision import FEATURE_LAYER
from ..models.vision.gemma4v import MAX_TOKENS
from ..models.vision.images import CLIP_MEAN, CLIP_STD
from . import audio_tower, gemma4_unified_towers, qwen_vl_tower
from .architectures import permute
from .checkpoint import Checkpoint, CheckpointError
from .writing import FILE_TYPES, write_tensors

VISION = gguf.Keys.ClipVision
# a checkpoint's tower and projector prefixes -> the ones gguf-py's table knows
PREFIXES = {"model.vision_tower.vision_model.": "vision_tower.vision_model.",
            "vision_tower.vision_model.": "vision_tower.vision_model.",
            "model.vision_tower.": "vision_tower.vision_model.",
            "vision_tower.": "vision_tower.vision_model.",
            "model.multi_modal_projector.": "multi_modal_projector.",
            "multi_modal_projector.": "multi_modal_projector.",
            "model.embed_vision.": "embed_vision."}
SKIPPED = ("vision_tower.vision_model.head.",)        # SigLIP's pooling head: unused
ACTIVATION_KEYS = {"gelu_pytorch_tanh": VISION.USE_GELU, "gelu": VISION.USE_GELU,
                   "silu": VISION.USE_SILU, "quick_gelu": None}


@dataclass(frozen=True)
class VisionTower:
    projector: str                                   # clip.projector_type
    hparams: Callable[[gguf.GGUFWriter, Checkpoint], None]
    names: dict[str, str] = field(default_factory=dict)     # HF name -> GGUF name ("": none)
    transform: Callable[[str, np.ndarray], np.ndarray] = lambda name, data: data
    rename: Callable[[str], str | None] | None = None       # names gguf-py's table lacks
    shape: Callable[[str, tuple], tuple] = lambda name, shape: tuple(shape)   # transformed
    # tensors the tower's file takes from elsewhere in the checkpoint (the text model's)
    extra: Callable[[Checkpoint], dict] = lambda checkpoint: {}
    permute_qk: bool = False       # Q and K rows: each head's rotated pairs made adjacent
    # the whole plan (GGUF name -> (shape, load)) where names alone do not say it
    plan: Callable[[Checkpoint], dict] | None = None
    # name endings that stay F32 in a file of that outtype
    keep_f32: Callable[[str], tuple[str, ...]] = lambda outtype: keep_f32(outtype)


def gemma3_hparams(writer: gguf.GGUFWriter, checkpoint: Checkpoint) -> None:
    config = checkpoint.config
    vision = config["vision_config"]
    side = vision["image_size"] // vision["patch_size"]
    per_side = math.isqrt(config.get("mm_tokens_per_image", 256))
    if per_side * per_side != config.get("mm_tokens_per_image", 256) or side % per_side:
        raise CheckpointError(f"mm_tokens_per_image {config.get('mm_tokens_per_image')} is not "
                              f"a square that divides the {side} x {side} patch grid.")
    write_vit(writer, vision, config["text_config"]["hidden_size"], (0.5, 0.5, 0.5),
              (0.5, 0.5, 0.5))
    writer.add_uint32(VISION.Projector.SCALE_FACTOR, side // per_side)


def llava_hparams(writer: gguf.GGUFWriter, checkpoint: Checkpoint) -> None:
    """CLIP read at vision_feature_layer (-2 by default, llama.cpp's default too), its class
    token dropped; a two-layer GELU MLP into the text model."""
    config = checkpoint.config
    vision = config["vision_config"]
    if config.get("vision_feature_select_strategy", "default") != "default":
        raise CheckpointError("Only LLaVA's default feature selection (the class token "
                              "dropped) is supported.")
    if config.get("projector_hidden_act", "gelu") != "gelu":
        raise CheckpointError(f"A LLaVA projector with {config['projector_hidden_act']} is not "
                              "supported (gelu is).")
    layer = config.get("vision_feature_layer", -2)
    if not isinstance(layer, int):
        raise CheckpointError("Features stacked from several layers are not supported.")
    write_vit(writer, vision, config["text_config"]["hidden_size"], CLIP_MEAN, CLIP_STD)
    layers = vision["num_hidden_layers"]
    if layer != -2:
        writer.add_array(FEATURE_LAYER, [layer if layer >= 0 else layers + 1 + layer])


def write_vit(writer: gguf.GGUFWriter, vision: dict, text_embd: int, mean, std) -> None:
    act = vision.get("hidden_act", "gelu_pytorch_tanh")
    if act not in ACTIVATION_KEYS:
        raise CheckpointError(f"A vision tower with {act} activations is not supported.")
    writer.add_bool(gguf.Keys.Clip.HAS_VISION_ENCODER, True)
    key = ACTIVATION_KEYS[act]
    if key:
        writer.add_bool(key, True)
    writer.add_uint32(VISION.IMAGE_SIZE, vision["image_size"])
    writer.add_uint32(VISION.PATCH_SIZE, vision["patch_size"])
    writer.add_uint32(VISION.EMBEDDING_LENGTH, vision["hidden_size"])
    writer.add_uint32(VISION.FEED_FORWARD_LENGTH, vision["intermediate_size"])
    writer.add_uint32(VISION.BLOCK_COUNT, vision["num_hidden_layers"])
    writer.add_uint32(VISION.PROJECTION_DIM, text_embd)
    writer.add_uint32(VISION.Attention.HEAD_COUNT, vision["num_attention_heads"])
    writer.add_float32(VISION.Attention.LAYERNORM_EPS,
                       vision.get("layer_norm_eps", vision.get("rms_norm_eps", 1e-6)))
    writer.add_array(VISION.IMAGE_MEAN, [float(x) for x in mean])
    writer.add_array(VISION.IMAGE_STD, [float(x) for x in std])


def gemma_norm(name: str, data: np.ndarray) -> np.ndarray:
    """Gemma's RMSNorm multiplies by 1 + weight: the file holds the sum."""
    return data + 1.0 if name == "mm.soft_emb_norm.weight" else data


def gemma4_hparams(writer: gguf.GGUFWriter, checkpoint: Checkpoint) -> None:
    """The pool, the soft-token budget (from the saved processor, else the reference's
    default) and the largest image it allows as image_size."""
    config = checkpoint.config
    vision = dict(config["vision_config"])
    if vision.get("head_dim", vision["hidden_size"] // vision["num_attention_heads"]) * \
            vision["num_attention_heads"] != vision["hidden_size"]:
        raise CheckpointError("Gemma 4 vision with head_dim * heads != hidden_size is not "
                              "supported.")
    pool = vision.get("pooling_kernel_size", 3)
    budget = _processor(checkpoint).get("max_soft_tokens", 280)
    vision["image_size"] = math.isqrt(budget) * pool * vision["patch_size"]
    write_vit(writer, vision, config["text_config"]["hidden_size"], (0.0, 0.0, 0.0),
              (1.0, 1.0, 1.0))
    writer.add_uint32(VISION.Projector.SCALE_FACTOR, pool)
    writer.add_uint32(MAX_TOKENS, budget)


def _processor(checkpoint: Checkpoint) -> dict:
    """The saved image processor's settings, if the checkpoint has them."""
    for name in ("preprocessor_config.json", "processor_config.json"):
        path = checkpoint.dir / name
        if path.exists():
            found = json.loads(path.read_text())
            return found.get("image_processor", found)
    return {}


GEMMA4_LAYER = re.compile(r"^vision_tower\.vision_model\.encoder\.layers\.(\d+)\.(.+)$")
GEMMA4_LINEARS = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                  "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_out",
                  "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                  "mlp.down_proj": "ffn_down"}
GEMMA4_NAMES = {
    "input_layernorm.weight": "ln1.weight",
    "post_attention_layernorm.weight": "attn_post_norm.weight",
    "pre_feedforward_layernorm.weight": "ln2.weight",
    "post_feedforward_layernorm.weight": "ffn_post_norm.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    **{f"{linear}.linear.weight": f"{name}.weight" for linear, name in GEMMA4_LINEARS.items()},
    **{f"{linear}.{clamp}": f"{name}.{clamp}" for linear, name in GEMMA4_LINEARS.items()
       for clamp in ("input_min", "input_max", "output_min", "output_max")}}


def gemma4_rename(name: str) -> str | None:
    found = GEMMA4_LAYER.match(name)
    if found and found.group(2) in GEMMA4_NAMES:
        return f"v.blk.{found.group(1)}.{GEMMA4_NAMES[found.group(2)]}"
    return None


def gemma4_shape(name: str, shape: tuple) -> tuple:
    """The patch embedding, a Linear over (row, column, channel) pixels, becomes the conv
    kernel (D, 3, p, p) llama.cpp reads; clamp scalars one-element tensors."""
    if name == "v.patch_embd.weight":
        patch = math.isqrt(shape[1] // 3)
        return (shape[0], 3, patch, patch)
    return tuple(shape) or (1,)


def gemma4_transform(name: str, data: np.ndarray) -> np.ndarray:
    if name == "v.patch_embd.weight":
        _, _, patch, _ = gemma4_shape(name, data.shape)
        return data.reshape(data.shape[0], patch, patch, 3).transpose(0, 3, 1, 2)
    return data.reshape(gemma4_shape(name, data.shape))


def pixtral_hparams(writer: gguf.GGUFWriter, checkpoint: Checkpoint) -> None:
    """The longest side as image_size, the merge, and llama.cpp's fixed RMSNorm epsilon
    and rope base (refused where the checkpoint's differ)."""
    config = checkpoint.config
    vision = dict(config["vision_config"])
    theta = (vision.get("rope_parameters") or {}).get("rope_theta", vision.get("rope_theta",
                                                                                 10000.0))
    if theta != 10000.0:
        raise CheckpointError(f"A Pixtral tower with rope theta {theta} is not supported "
                              "(llama.cpp's pixtral reads 10000).")
    if config.get("vision_feature_layer", -1) != -1 or \
            config.get("vision_feature_select_strategy", "full") != "full":
        raise CheckpointError("Only the Pixtral tower's last layer, every row of it, is "
                              "supported as its features.")
    if config.get("projector_hidden_act", "gelu") != "gelu":
        raise CheckpointError(f"A Mistral 3 projector with {config['projector_hidden_act']} "
                              "is not supported (gelu is).")
    processor = _processor(checkpoint)
    longest = (processor.get("size") or {}).get("longest_edge", vision["image_size"])
    vision.update(image_size=longest, layer_norm_eps=1e-5)
    write_vit(writer, vision, config["text_config"]["hidden_size"],
              processor.get("image_mean", CLIP_MEAN), processor.get("image_std", CLIP_STD))
    writer.add_uint32(VISION.SPATIAL_MERGE_SIZE, config.get("spatial_merge_size", 1))


def pixtral_rename(name: str) -> str | None:
    """gguf-py's table names the tower without vision_model."""
    prefix = "vision_tower.vision_model."
    if not name.startswith(prefix):
        return None
    table = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, 1024)
    return table.get_name("vision_tower." + name[len(prefix):], try_suffixes=(".weight",))


def pixtral_break(checkpoint: Checkpoint) -> dict:
    """v.token_embd.img_break: the text model's embedding of [IMG_BREAK]."""
    tokens = json.loads((checkpoint.dir / "tokenizer.json").read_text()) \
        if (checkpoint.dir / "tokenizer.json").exists() else {}
    ids = [t["id"] for t in tokens.get("added_tokens", []) if t["content"] == "[IMG_BREAK]"]
    table = next((entry for name, entry in checkpoint.tensors.items()
                  if name.endswith("embed_tokens.weight")), None)
    if not ids or table is None:
        raise CheckpointError("A Pixtral checkpoint needs its tokenizer's [IMG_BREAK] and the "
                              "text model's embed_tokens.")
    return {"v.token_embd.img_break": ((table.shape[1],),
                                       lambda: np.ascontiguousarray(table.load()[ids[0]]))}


def qwen_vl_hparams(writer: gguf.GGUFWriter, checkpoint: Checkpoint) -> None:
    qwen_vl_tower.write_hparams(writer, checkpoint, _processor(checkpoint))


TOWERS = {
    "gemma3": VisionTower("gemma3", gemma3_hparams,
                          {"multi_modal_projector.mm_input_projection_weight":
                           "mm.input_projection.weight"}, gemma_norm),
    "llava": VisionTower("mlp", llava_hparams, {
        "multi_modal_projector.linear_1.weight": "mm.0.weight",
        "multi_modal_projector.linear_1.bias": "mm.0.bias",
        "multi_modal_projector.linear_2.weight": "mm.2.weight",
        "multi_modal_projector.linear_2.bias": "mm.2.bias",
        # the features are read before it
        "vision_tower.vision_model.post_layernorm.weight": "",
        "vision_tower.vision_model.post_layernorm.bias": ""}),
    "gemma4": VisionTower("gemma4v", gemma4_hparams, {
        "vision_tower.vision_model.patch_embedder.input_proj.weight": "v.patch_embd.weight",
        "vision_tower.vision_model.patch_embedder.position_embedding_table":
            "v.position_embd.weight",
        "embed_vision.embedding_projection.weight": "mm.input_projection.weight",
        "vision_tower.vision_model.std_bias": "v.std_bias",
        "vision_tower.vision_model.std_scale": "v.std_scale"}, gemma4_transform, gemma4_rename,
        gemma4_shape),
    # Gemma 4 12B's: no transformer (convert/gemma4_unified_towers.py)
    "gemma4_unified": VisionTower("gemma4uv", gemma4_unified_towers.vision_hparams,
                                  plan=gemma4_unified_towers.vision_plan,
                                  keep_f32=gemma4_unified_towers.keep_f32),
    "mistral3": VisionTower("pixtral", pixtral_hparams, {
        "multi_modal_projector.linear_1.weight": "mm.1.weight",
        "multi_modal_projector.linear_1.bias": "mm.1.bias",
        "multi_modal_projector.linear_2.weight": "mm.2.weight",
        "multi_modal_projector.linear_2.bias": "mm.2.bias"},
        rename=pixtral_rename, extra=pixtral_break, permute_qk=True),
    "qwen2_5_vl": VisionTower("qwen2.5vl_merger", qwen_vl_hparams, plan=qwen_vl_tower.plan),
    "qwen2_vl": VisionTower("qwen2vl_merger", qwen_vl_hparams, plan=qwen_vl_tower.plan),
    "qwen3_vl": VisionTower("qwen3vl_merger", qwen_vl_hparams, plan=qwen_vl_tower.plan),
    "qwen3_vl_moe": VisionTower("qwen3vl_merger", qwen_vl_hparams, plan=qwen_vl_tower.plan),
    # Qwen 3.5's: Qwen3-VL's without deepstack
    "qwen3_5": VisionTower("qwen3vl_merger", qwen_vl_hparams, plan=qwen_vl_tower.plan),
    "qwen3_5_moe": VisionTower("qwen3vl_merger", qwen_vl_hparams, plan=qwen_vl_tower.plan),
}


def keep_f32(outtype: str) -> tuple[str, ...]:
    """As llama.cpp's converter types them (its clip reads them so): position tables and the
    class token F32; the patch kernel F16 only in an f16 file."""
    kept = ("position_embd.weight", "class_embd")
    return kept if outtype == "f16" else kept + ("patch_embd.weight", "patch_embd.weight.1")


# (checkpoint type, its vision tower's type) -> the tower, where a type holds several:
# Pixtral 12B is LLaVA's projector (biased, no norm, no merger) after a Pixtral tower
TOWER_VARIANTS: dict[tuple[str | None, str | None], str] = {("llava", "pixtral"): "mistral3"}


def tower_of(config: dict) -> VisionTower:
    kind = config.get("model_type")
    kind = TOWER_VARIANTS.get((kind, (config.get("vision_config") or {}).get("model_type")),
                              kind)
    if kind not in TOWERS:
        raise CheckpointError(f"The checkpoint type {kind!r} has no vision tower this "
                              f"converter writes; it writes {', '.join(TOWERS)}.")
    return TOWERS[kind]


# checkpoint type -> its audio tower's keys, tensors and the name endings kept F32
AUDIO_TOWERS = {"gemma4": (audio_tower.write_hparams, audio_tower.plan, audio_tower.KEEP_F32),
                "gemma4_unified": (gemma4_unified_towers.audio_hparams,
                                   gemma4_unified_towers.audio_plan, ())}


def write_mmproj(checkpoint: Checkpoint, out, outtype: str, progress: bool = True) -> Path:
    """The checkpoint's vision tower, its audio tower (Gemma 4's), or both, in one file: a
    file with both names each projector type under its modality's key, as llama.cpp's."""
    config = checkpoint.config
    if config.get("model_type") in AUDIO_TOWERS and not (config.get("vision_config") or
                                                         config.get("audio_config")):
        raise CheckpointError(f"The {config['model_type']!r} checkpoint has neither a vision "
                              "nor an audio tower (config.json's vision_config and "
                              "audio_config are empty): there is no projector to write.")
    audio = AUDIO_TOWERS.get(config.get("model_type", "")) if config.get("audio_config") else None
    vision = tower_of(config) if config.get("vision_config") or not audio else None
    out = Path(out)
    writer = gguf.GGUFWriter(str(out), "clip")
    writer.add_type(gguf.GGUFType.MMPROJ)
    writer.add_name(checkpoint.dir.name)
    writer.add_file_type(FILE_TYPES[outtype])
    plan: dict[str, tuple] = {}
    kept: tuple[str, ...] = ()
    if vision is not None:
        writer.add_string(VISION.PROJECTOR_TYPE if audio else gguf.Keys.Clip.PROJECTOR_TYPE,
                          vision.projector)
        vision.hparams(writer, checkpoint)
        plan |= vision.plan(checkpoint) if vision.plan else _plan(checkpoint, vision)
        kept += vision.keep_f32(outtype)
    if audio:
        write_audio, audio_plan, audio_kept = audio
        write_audio(writer, checkpoint)
        plan |= audio_plan(checkpoint)
        kept += audio_kept
    write_tensors(writer, plan, outtype, kept, progress=progress)
    return out


QK = re.compile(r"^v\.blk\.\d+\.attn_[qk]\.weight$")


def _plan(checkpoint: Checkpoint, tower: VisionTower) -> dict:
    layers = checkpoint.config["vision_config"]["num_hidden_layers"]
    heads = checkpoint.config["vision_config"]["num_attention_heads"]

    def transform(name: str, data: np.ndarray) -> np.ndarray:
        data = tower.transform(name, data)
        return permute(data, heads) if tower.permute_qk and QK.match(name) else data

    table = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, layers)
    plan = {}
    for entry in checkpoint.tensors.values():
        name = _canonical(entry.name)
        if name is None or name.startswith(SKIPPED):
            continue
        gguf_name = tower.names[name] if name in tower.names else \
            (tower.rename and tower.rename(name)) or \
            table.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name == "":
            continue
        if gguf_name is None:
            raise CheckpointError(f"The tensor {entry.name} has no mmproj name.")
        plan[gguf_name] = (tower.shape(gguf_name, entry.shape),
                           lambda entry=entry, gguf_name=gguf_name:
                           transform(gguf_name, entry.load()))
    if not plan:
        raise CheckpointError("The checkpoint has no vision tower tensors.")
    return plan | tower.extra(checkpoint)


def _canonical(name: str) -> str | None:
    for prefix, canonical in PREFIXES.items():
        if name.startswith(prefix):
            return canonical + name[len(prefix):]
    return None
