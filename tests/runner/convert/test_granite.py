"""Granite's multipliers as llama.cpp's converter writes them (transformers' defaults where
config.json has none), and the checkpoints llama.cpp's granite could not run as transformers
does, refused. (test_parity.py runs Granite, Granite MoE and its shared expert against
transformers.)"""

from __future__ import annotations

import pytest

from pyggml.gguf_reader import Header
from runner.convert import CheckpointError, convert

from tests.support.hf_tiny import GRANITE
from tests.support.hostile_checkpoint import rewritten


def test_multipliers_are_written_with_transformers_defaults(made, tmp_path):
    meta = Header(made("granite")["f32"]).metadata
    assert [meta[f"granite.{key}"] for key in ("attention.scale", "embedding_scale",
                                               "residual_scale", "logit_scale")] == \
        pytest.approx([GRANITE[name] for name in ("attention_multiplier",
                                                  "embedding_multiplier",
                                                  "residual_multiplier", "logits_scaling")])
    bare = rewritten(made("granite")["hf"], tmp_path / "bare", dict.fromkeys(
        ("attention_multiplier", "embedding_multiplier", "residual_multiplier",
         "logits_scaling")))
    meta = Header(convert(bare, tmp_path / "bare.gguf", "f32", progress=False)).metadata
    assert meta["granite.attention.scale"] == meta["granite.logit_scale"] == 1.0


def test_granite_moe_writes_its_experts_and_shared_expert(made):
    meta = Header(made("granitemoeshared")["f32"]).metadata
    assert (meta["granitemoe.expert_count"], meta["granitemoe.expert_used_count"],
            meta["granitemoe.expert_shared_feed_forward_length"]) == (8, 2, 48)
    names = {t.name for t in Header(made("granitemoeshared")["f32"]).tensors}
    assert {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight",
            "blk.0.ffn_gate_shexp.weight", "blk.0.ffn_up_shexp.weight",
            "blk.0.ffn_down_shexp.weight"} <= names


@pytest.mark.parametrize("kind, changes, words", [
    ("granite", dict(head_dim=32), r"head_dim \(32\) is not hidden_size / "
                                   r"num_attention_heads \(16\)"),
    ("granite", dict(attention_multiplier=0.0), "attention_multiplier is 0"),
    ("granitemoe", dict(num_local_experts=0), "has no experts"),
])
def test_what_llama_cpps_granite_cannot_express_is_refused(made, tmp_path, kind, changes,
                                                           words):
    bad = rewritten(made(kind)["hf"], tmp_path / "bad", changes)
    with pytest.raises(CheckpointError, match=words):
        convert(bad, tmp_path / "bad.gguf", "f32", progress=False)
