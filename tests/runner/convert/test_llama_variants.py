"""SmolLM3, Seed-OSS and Mixtral checkpoints that llama.cpp's smollm3, seed_oss and llama
could not run as transformers does are refused, each with a sentence naming what. (Their
parity with transformers: test_parity.py; with llama.cpp: the slow suite.)"""

from __future__ import annotations

import pytest

from runner.convert import CheckpointError, convert

from tests.support.hostile_checkpoint import rewritten


@pytest.mark.parametrize("kind, changes, words", [
    ("smollm3", dict(no_rope_layers=[1, 0, 1, 1]), "no_rope_layers are not every 4th layer"),
    ("smollm3", dict(use_sliding_window=True, sliding_window=8), "sliding layers"),
    ("smollm3", dict(mlp_bias=True), "biases"),
    ("seed_oss", dict(attention_out_bias=True), "attention output or FFN bias"),
    ("mixtral", dict(sliding_window=8), "window of 8 positions"),
])
def test_what_llama_cpp_cannot_express_is_refused(made, tmp_path, kind, changes, words):
    bad = rewritten(made(kind)["hf"], tmp_path / "bad", changes)
    with pytest.raises(CheckpointError, match=words):
        convert(bad, tmp_path / "bad.gguf", "f32", progress=False)


def test_a_mixtral_window_past_its_context_is_no_window(made, tmp_path):
    """Mixtral's released config says sliding_window null or a window as long as the
    context: either converts."""
    hf = made("mixtral")["hf"]
    wide = rewritten(hf, tmp_path / "wide", dict(sliding_window=256))
    assert convert(wide, tmp_path / "wide.gguf", "f32", progress=False).exists()
