"""Mixture-of-experts checkpoints come two ways: one tensor per expert (the released Qwen3
MoE files) or the fused tensors transformers saves. Both convert to the same GGUF file, and
checkpoints whose routing llama.cpp's qwen3moe cannot express are refused."""

from __future__ import annotations

import json

import pytest

from runner.convert import CheckpointError, convert

from tests.support.gguf_edit import tensors_of
from tests.support.hf_released import per_expert
from tests.support.hf_tiny import checkpoint


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
