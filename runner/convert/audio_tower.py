"""Gemma 4's audio tower and embedder -> the audio half of an mmproj GGUF, as llama.cpp's
converter writes it (clip.audio.* keys, projector type gemma4a, a.* and mm.a.* tensors):
names through gguf-py's table once the tower's prefix is "conformer.", ".linear." dropped from
the clamped linears; per_dim_scale stored as softplus(parameter); the depthwise kernel
(C, 1, K) as (C, K); clamp bounds as one-element tensors; the convolutions kept F32.
"""

from __future__ import annotations

import numpy as np
import gguf

from .checkpoint import Checkpoint, CheckpointError

AUDIO = gguf.Keys.ClipAudio
PREFIXES = {"model.audio_tower.": "conformer.", "audio_tower.": "conformer.",
            "model.embed_audio.": "model.embed_audio.", "embed_audio.": "model.embed_audio."}
SUFFIXES = (".weight", ".bias", ".input_max", ".input_min", ".output_max", ".output_min")
KEEP_F32 = ("a.conv1d.0.weight", "a.conv1d.1.weight", "a.input_projection.weight",
            "conv_dw.weight")
MEL_BINS = 128                  # the feature extractor's


def write_hparams(writer: gguf.GGUFWriter, checkpoint: Checkpoint) -> None:
    config = checkpoint.config
    audio = config["audio_config"]
    hidden = audio["hidden_size"]
    writer.add_bool(gguf.Keys.Clip.HAS_AUDIO_ENCODER, True)
    writer.add_string(AUDIO.PROJECTOR_TYPE, "gemma4a")
    writer.add_uint32(AUDIO.EMBEDDING_LENGTH, hidden)
    writer.add_uint32(AUDIO.FEED_FORWARD_LENGTH, 4 * hidden)
    writer.add_uint32(AUDIO.BLOCK_COUNT, audio["num_hidden_layers"])
    writer.add_uint32(AUDIO.Attention.HEAD_COUNT, audio["num_attention_heads"])
    writer.add_float32(AUDIO.Attention.LAYERNORM_EPS, audio.get("rms_norm_eps", 1e-6))
    writer.add_uint32(AUDIO.NUM_MEL_BINS, MEL_BINS)
    writer.add_uint32(AUDIO.PROJECTION_DIM, config["text_config"]["hidden_size"])
    for key, expected in (("attention_chunk_size", 12), ("attention_context_left", 13),
                          ("attention_context_right", 0)):
        if audio.get(key, expected) != expected:
            raise CheckpointError(f"An audio tower with {key} {audio[key]} is not supported "
                                  f"({expected} is).")


def plan(checkpoint: Checkpoint) -> dict:
    """GGUF name -> (shape, loader) of the audio tower's tensors."""
    layers = checkpoint.config["audio_config"]["num_hidden_layers"]
    table = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, layers)
    found = {}
    for entry in checkpoint.tensors.values():
        name = _canonical(entry.name)
        if name is None:
            continue
        name = name.replace(".linear.", ".")
        softplus = name.endswith("per_dim_scale")
        if softplus:
            name += ".weight"
        gguf_name = table.get_name(name, try_suffixes=SUFFIXES)
        if gguf_name is None:
            raise CheckpointError(f"The tensor {entry.name} has no mmproj name.")
        shape = tuple(entry.shape) or (1,)
        if gguf_name.endswith("conv_dw.weight"):
            shape = (shape[0], shape[-1])
        found[gguf_name] = (shape, lambda entry=entry, shape=shape, softplus=softplus:
                            _load(entry, shape, softplus))
    if not found:
        raise CheckpointError("The checkpoint has no audio tower tensors.")
    return found


def _load(entry, shape: tuple, softplus: bool) -> np.ndarray:
    data = entry.load().astype(np.float64)
    if softplus:
        data = np.logaddexp(0.0, data)
    return data.reshape(shape).astype(np.float32)


def _canonical(name: str) -> str | None:
    for prefix, canonical in PREFIXES.items():
        if name.startswith(prefix):
            return canonical + name[len(prefix):]
    return None
