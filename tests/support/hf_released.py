"""Tiny checkpoints as released ones lay them out: per-expert tensors, an MTP head, MXFP4."""

from __future__ import annotations

import shutil

import numpy as np
from safetensors.numpy import load_file, save_file

from runner.convert.checkpoint import Checkpoint

from tests.support.hf_tiny import checkpoint


def per_expert(fused_dir, out_dir):
    """The checkpoint with each layer's fused experts split into one tensor per expert."""
    shutil.copytree(fused_dir, out_dir)
    (weights_file,) = out_dir.glob("*.safetensors")
    tensors, split = load_file(weights_file), {}
    for name, value in tensors.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            prefix = name.removesuffix(".gate_up_proj")
            for e, both in enumerate(value):
                gate, up = np.split(both, 2)
                split[f"{prefix}.{e}.gate_proj.weight"] = np.ascontiguousarray(gate)
                split[f"{prefix}.{e}.up_proj.weight"] = np.ascontiguousarray(up)
        elif name.endswith("mlp.experts.down_proj"):
            prefix = name.removesuffix(".down_proj")
            for e, down in enumerate(value):
                split[f"{prefix}.{e}.down_proj.weight"] = np.ascontiguousarray(down)
        else:
            split[name] = value
    save_file(split, weights_file, metadata={"format": "pt"})
    return out_dir


def with_mtp_head(hf, directory):
    """hf's checkpoint with an MTP head as the released ones hold it (mtp.*, which
    transformers neither saves nor loads): a copy of layer 3 (full attention) and its own
    projection and norms, random."""
    shutil.copytree(hf, directory)
    tensors = load_file(directory / "model.safetensors")
    rng = np.random.default_rng(0)
    embd = tensors["model.norm.weight"].shape[0]
    for name, data in list(tensors.items()):
        if name.startswith("model.layers.3."):
            tensors["mtp.layers.0." + name.removeprefix("model.layers.3.")] = data
    tensors["mtp.fc.weight"] = rng.normal(0, 0.1, (embd, 2 * embd)).astype(np.float32)
    for part in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        tensors[f"mtp.{part}.weight"] = rng.normal(0, 0.1, embd).astype(np.float32)
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    return directory, tensors


# E2M1's magnitudes, by code (the sign is the code's fourth bit)
FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)


def to_mxfp4(weights: np.ndarray):
    """(..., in) float -> (blocks (..., in/32, 16), scales (..., in/32), the weights they
    encode): per 32 values the smallest power of two that fits them under 6, each value the
    nearest E2M1, two a byte in order (OpenAI's layout)."""
    groups = weights.reshape(*weights.shape[:-1], -1, 32)
    peak = np.abs(groups).max(-1, keepdims=True)
    exponent = np.ceil(np.log2(np.maximum(peak, 1e-30) / 6.0)).astype(np.int32)
    scaled = groups / np.exp2(exponent)
    codes = np.abs(np.abs(scaled)[..., None] - FP4).argmin(-1).astype(np.uint8)
    codes |= (scaled < 0).astype(np.uint8) << 3
    encoded = np.where(codes & 8, -1.0, 1.0) * FP4[codes & 7] * np.exp2(exponent)
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    scales = (exponent[..., 0] + 127).astype(np.uint8)
    # contiguous: safetensors' save_file writes an array's memory as it lies
    return (np.ascontiguousarray(blocks), np.ascontiguousarray(scales),
            encoded.reshape(weights.shape).astype(np.float32))


def mxfp4_checkpoints(directory):
    """The tiny gpt-oss twice: its experts in MXFP4 blocks (released layout: (experts, out,
    in) rows), and in float holding exactly the weights those blocks encode."""
    plain = checkpoint("gpt_oss", directory / "plain")
    tensors = {name: entry.load() for name, entry in Checkpoint(plain).tensors.items()}
    packed, decoded = dict(tensors), dict(tensors)
    for name in [n for n in tensors if n.endswith(("gate_up_proj", "down_proj"))]:
        rows = tensors[name].transpose(0, 2, 1)                       # (X, out, in)
        blocks, scales, encoded = to_mxfp4(rows)
        del packed[name]
        packed[name + "_blocks"], packed[name + "_scales"] = blocks, scales
        decoded[name] = np.ascontiguousarray(encoded.transpose(0, 2, 1))
    for target, weights in (("mxfp4", packed), ("decoded", decoded)):
        (directory / target).mkdir()
        for file in plain.iterdir():
            if file.suffix != ".safetensors":
                (directory / target / file.name).write_bytes(file.read_bytes())
        save_file(weights, str(directory / target / "model.safetensors"))
    return directory / "mxfp4", directory / "decoded"
