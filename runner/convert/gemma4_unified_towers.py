"""Gemma 4 12B's ("unified") vision and audio embedders -> an mmproj GGUF as llama.cpp's
converter (Gemma4UnifiedVisionAudioModel) writes them: projector types gemma4uv and
gemma4ua. Neither has a transformer: the vision tower's patch_dense columns and patch_ln1
reordered from the checkpoint's pixel order (row, column, channel) to the channel-first one
ggml's im2col gives, pos_embedding (T, 2, D) stored as (2, T, D), pos_norm as v.patch_norm.3;
the audio's only tensor is its projection of raw 640-sample frames.
"""

from __future__ import annotations

import gguf
import numpy as np

from .checkpoint import Checkpoint, CheckpointError

VISION = gguf.Keys.ClipVision
AUDIO = gguf.Keys.ClipAudio
VISION_NAMES = {
    "vision_embedder.patch_ln1.weight": "v.patch_norm.1.weight",
    "vision_embedder.patch_ln1.bias": "v.patch_norm.1.bias",
    "vision_embedder.patch_dense.weight": "v.patch_embd.weight",
    "vision_embedder.patch_dense.bias": "v.patch_embd.bias",
    "vision_embedder.patch_ln2.weight": "v.patch_norm.2.weight",
    "vision_embedder.patch_ln2.bias": "v.patch_norm.2.bias",
    "vision_embedder.pos_embedding": "v.position_embd.weight",
    "vision_embedder.pos_norm.weight": "v.patch_norm.3.weight",
    "vision_embedder.pos_norm.bias": "v.patch_norm.3.bias",
    "embed_vision.embedding_projection.weight": "mm.input_projection.weight"}
# transformers' own module names for the same tensors (its loading renames them)
VISION_NAMES |= {name.replace("vision_embedder.", "embed_vision."): gguf_name
                 for name, gguf_name in VISION_NAMES.items()
                 if name.startswith("vision_embedder.")}
VISION_NAMES["embed_vision.multimodal_embedder.embedding_projection.weight"] = \
    "mm.input_projection.weight"
AUDIO_NAMES = {"embed_audio.embedding_projection.weight": "mm.a.input_projection.weight"}
CHANNEL_FIRST = ("v.patch_norm.1.weight", "v.patch_norm.1.bias", "v.patch_embd.weight")


def keep_f32(outtype: str) -> tuple[str, ...]:
    """As llama.cpp's converter types them: the patch kernel F16 in an f16 file, else F32;
    the position table as any other (its gemma4v rule names the other tower's table)."""
    return () if outtype == "f16" else ("patch_embd.weight",)


def model_patch(vision: dict) -> int:
    return vision.get("patch_size", 16) * vision.get("pooling_kernel_size", 3)


def vision_hparams(writer: gguf.GGUFWriter, checkpoint: Checkpoint) -> None:
    """As llama.cpp's converter: the 16-pixel patch and the pool (its graph's patch is their
    product), mm_embed_dim as the width, no blocks, pixels 0..1."""
    config = checkpoint.config
    vision = config["vision_config"]
    embd = vision.get("mm_embed_dim", 3840)
    if vision.get("output_proj_dims", embd) != embd:
        raise CheckpointError(f"A unified vision embedder whose output_proj_dims "
                              f"({vision['output_proj_dims']}) differs from mm_embed_dim "
                              f"({embd}) is not supported.")
    writer.add_bool(gguf.Keys.Clip.HAS_VISION_ENCODER, True)
    writer.add_uint32(VISION.PROJECTION_DIM, config["text_config"]["hidden_size"])
    writer.add_uint32(VISION.IMAGE_SIZE, 224)           # unused, as llama.cpp writes it
    writer.add_uint32(VISION.PATCH_SIZE, vision.get("patch_size", 16))
    writer.add_uint32(VISION.EMBEDDING_LENGTH, embd)
    writer.add_uint32(VISION.FEED_FORWARD_LENGTH, 0)
    writer.add_uint32(VISION.BLOCK_COUNT, 0)
    writer.add_uint32(VISION.Attention.HEAD_COUNT, 0)
    writer.add_array(VISION.IMAGE_MEAN, [0.0, 0.0, 0.0])
    writer.add_array(VISION.IMAGE_STD, [1.0, 1.0, 1.0])
    writer.add_float32(VISION.Attention.LAYERNORM_EPS, vision.get("rms_norm_eps", 1e-6))
    writer.add_uint32(VISION.Projector.SCALE_FACTOR, vision.get("pooling_kernel_size", 3))


def audio_hparams(writer: gguf.GGUFWriter, checkpoint: Checkpoint) -> None:
    """One token per frame of audio_embed_dim samples (llama.cpp fixes 640 and 16 kHz)."""
    config = checkpoint.config
    audio = config["audio_config"]
    frame = audio.get("audio_embed_dim", 640)
    if frame != 640:
        raise CheckpointError(f"A unified audio embedder of {frame}-sample frames is not "
                              "supported (llama.cpp reads 640).")
    writer.add_bool(gguf.Keys.Clip.HAS_AUDIO_ENCODER, True)
    writer.add_string(AUDIO.PROJECTOR_TYPE, "gemma4ua")
    writer.add_uint32(AUDIO.PROJECTION_DIM, config["text_config"]["hidden_size"])
    writer.add_uint32(AUDIO.EMBEDDING_LENGTH, frame)
    writer.add_uint32(AUDIO.FEED_FORWARD_LENGTH, 0)
    writer.add_uint32(AUDIO.BLOCK_COUNT, 0)
    writer.add_uint32(AUDIO.Attention.HEAD_COUNT, 0)
    writer.add_uint32(AUDIO.NUM_MEL_BINS, frame)
    writer.add_float32(AUDIO.Attention.LAYERNORM_EPS, audio.get("rms_norm_eps", 1e-6))


def channel_first(patch: int) -> np.ndarray:
    """For each channel-first pixel index (channel, row, column) the checkpoint's
    (row, column, channel) index."""
    i = np.arange(3 * patch * patch)
    channel, row, column = i // (patch * patch), (i % (patch * patch)) // patch, i % patch
    return row * patch * 3 + column * 3 + channel


def vision_plan(checkpoint: Checkpoint) -> dict:
    order = channel_first(model_patch(checkpoint.config["vision_config"]))

    def load(entry, gguf_name: str) -> np.ndarray:
        data = entry.load()
        if gguf_name in CHANNEL_FIRST:
            return np.ascontiguousarray(data[..., order])       # the last axis: pixels
        if gguf_name == "v.position_embd.weight":
            return np.ascontiguousarray(data.transpose(1, 0, 2))    # (T, 2, D) -> (2, T, D)
        return data

    return _plan(checkpoint, VISION_NAMES, load, "vision")


def audio_plan(checkpoint: Checkpoint) -> dict:
    return _plan(checkpoint, AUDIO_NAMES, lambda entry, gguf_name: entry.load(), "audio")


def _plan(checkpoint: Checkpoint, names: dict, load, what: str) -> dict:
    plan = {}
    for entry in checkpoint.tensors.values():
        name = entry.name.removeprefix("model.")
        if name not in names:
            continue
        gguf_name = names[name]
        shape = tuple(entry.shape)
        if gguf_name == "v.position_embd.weight":
            shape = (shape[1], shape[0], shape[2])
        plan[gguf_name] = (shape, lambda entry=entry, gguf_name=gguf_name:
                           load(entry, gguf_name))
    if not plan:
        raise CheckpointError(f"The checkpoint has no unified {what} embedder tensors.")
    return plan
