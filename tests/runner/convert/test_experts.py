"""Mixture-of-experts checkpoints come two ways: one tensor per expert (the released Qwen3
MoE files) or the fused tensors transformers saves. Both convert to the same GGUF file, and
checkpoints whose routing llama.cpp's qwen3moe cannot express are refused."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from pyggml.gguf_reader import Header
from runner.convert import CheckpointError, convert

from .hf_tiny import checkpoint


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


def tensors_of(path) -> dict:
    header = Header(path)
    data = np.memmap(path, np.uint8, mode="r")
    return {t.name: bytes(data[t.offset:t.offset + t.n_bytes]) for t in header.tensors}


def test_per_expert_and_fused_checkpoints_convert_to_the_same_file(tmp_path):
    fused = checkpoint("qwen3_moe", tmp_path / "fused")
    split = per_expert(fused, tmp_path / "split")
    a = convert(fused, tmp_path / "a.gguf", "f32", progress=False)
    b = convert(split, tmp_path / "b.gguf", "f32", progress=False)
    ours, theirs = tensors_of(a), tensors_of(b)
    assert ours.keys() == theirs.keys() and "blk.0.ffn_gate_exps.weight" in ours
    assert all(ours[name] == theirs[name] for name in ours)


@pytest.mark.parametrize("change, words", [
    ({"norm_topk_prob": False}, "renormalise"),
    ({"mlp_only_layers": [0]}, "dense layers"),
])
def test_routing_llama_cpp_cannot_express_is_refused(tmp_path, change, words):
    directory = checkpoint("qwen3_moe", tmp_path / "hf")
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(CheckpointError, match=words):
        convert(directory, tmp_path / "m.gguf", "f32", progress=False)
