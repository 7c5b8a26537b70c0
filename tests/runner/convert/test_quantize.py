"""Quantizing converted tiny models: llama.cpp's mixture rules, the logits after, the CLI."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
from pyggml.gguf_reader import Header
from runner.convert import convert
from runner.convert.quantize import (MIXTURES, quantize_file, tensor_type, use_more_bits,
                                     value_ranks)
from runner.engine.batch import Batch

from tests.support.cli import cli
from tests.support.hf_tiny import checkpoint
from tests.support.parity import PROMPT, executor


def test_mixture_rules_follow_llama_cpp():
    q4km, q8 = MIXTURES["Q4_K_M"], MIXTURES["Q8_0"]
    rows = (4096, 4096)
    assert [i for i in range(32) if use_more_bits(i, 32)] == \
        [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    assert tensor_type("blk.0.attn_v.weight", rows, q4km, 32, True) == "Q6_K"
    assert tensor_type("blk.5.attn_v.weight", rows, q4km, 32, True) == "Q4_K"
    assert tensor_type("blk.6.ffn_down.weight", rows, q4km, 32, True) == "Q6_K"
    assert tensor_type("blk.6.ffn_down_exps.weight", (8, 4096, 4096), q4km, 32, True) == "Q6_K"
    assert tensor_type("blk.5.attn_q.weight", rows, q4km, 32, True) == "Q4_K"
    assert tensor_type("output.weight", rows, q4km, 32, True) == "Q6_K"
    assert tensor_type("token_embd.weight", rows, q4km, 32, False) == "Q6_K"   # tied
    assert tensor_type("token_embd.weight", rows, q4km, 32, True) == "Q4_K"
    assert tensor_type("output.weight", rows, q8, 32, True) == "Q8_0"
    assert tensor_type("blk.0.attn_norm.weight", (4096,), q4km, 32, True) == "F32"
    assert tensor_type("blk.0.ffn_gate_inp.weight", (8, 4096), q4km, 32, True) == "F32"
    assert tensor_type("blk.5.attn_q.weight", (64, 64), q4km, 32, True) == "Q5_0"


def test_attn_v_is_ranked_among_the_files_attn_v_tensors_not_by_layer():
    """llama.cpp counts attn_v-like tensors (i_attention_wv of n_attention_wv) in its order,
    by layer number then name: Gemma 4 12B's full layers (every sixth) have none, their V
    is K, so from layer 5 on a tensor's place is not its layer's."""
    names = [f"blk.{i}.attn_v.weight" for i in range(48) if i % 6 != 5] + \
        ["blk.0.attn_k.weight", "output.weight"]
    ranks = value_ranks(names)
    assert len(ranks) == 40 and ranks["blk.0.attn_v.weight"] == (0, 40)
    assert ranks["blk.6.attn_v.weight"] == (5, 40) and ranks["blk.12.attn_v.weight"] == (10, 40)
    rows, q4km = (4096, 4096), MIXTURES["Q4_K_M"]
    assert tensor_type("blk.12.attn_v.weight", rows, q4km, 48, True) == "Q4_K"     # by layer
    assert tensor_type("blk.12.attn_v.weight", rows, q4km, 48, True,
                       rank=ranks["blk.12.attn_v.weight"]) == "Q6_K"
    assert tensor_type("output.weight", (64, 64), MIXTURES["Q4_0"], 32, True) == "Q8_0"
    assert tensor_type("per_layer_token_embd.weight", (64, 48), q4km, 32, True) == "F16"
    assert tensor_type("per_layer_token_embd.weight", rows, q4km, 32, False) == "Q6_K"
    for kept in ("blk.3.laurel_l.weight", "altup_proj.weight", "per_layer_model_proj.weight",
                 "position_embd.weight"):                   # llama.cpp leaves them alone
        assert tensor_type(kept, rows, q4km, 32, True, source="F16") == "F16", kept


@pytest.fixture(scope="module")
def f16(tmp_path_factory):
    directory = tmp_path_factory.mktemp("quantize")
    hf = checkpoint("qwen3", directory / "hf", hidden_size=256, intermediate_size=512,
                    head_dim=64)
    return convert(hf, directory / "f16.gguf", "f16", progress=False)


def logits(path, backend):
    model, run = executor(path, backend, "f16")
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    return run.logits(Batch.of_sequence(ids, 0, all_logits=True))


def test_q8_0_round_trip_stays_close(f16, backend, tmp_path):
    base = logits(f16, backend)
    quantized = logits(quantize_file(f16, tmp_path / "q8.gguf", "Q8_0", progress=False),
                       backend)
    # tolerance: 10% of the largest logit; random tiny weights are harsher than trained ones
    # (measured: 0.26 of 4.0)
    assert np.abs(quantized - base).max() < 0.1 * np.abs(base).max()
    assert (quantized.argmax(-1) == base.argmax(-1)).mean() >= 0.9


@pytest.mark.parametrize("kind", sorted(MIXTURES))
def test_every_type_loads_with_its_mixture(f16, backend, tmp_path, kind):
    out = quantize_file(f16, tmp_path / f"{kind}.gguf", kind, progress=False)
    types = {t.name: pyggml.dtypes.type_name(t.type).upper() for t in Header(out).tensors}
    assert types["blk.0.attn_norm.weight"] == "F32"
    assert types["blk.0.attn_q.weight"] == MIXTURES[kind].base
    assert types["output.weight"] == ("Q8_0" if kind == "Q8_0" else "Q6_K")
    assert Header(out).metadata["general.file_type"] == int(MIXTURES[kind].file_type)
    assert np.isfinite(logits(out, backend)).all()


def test_quantized_input_and_unknown_types_are_refused(f16, tmp_path):
    q4 = quantize_file(f16, tmp_path / "q4.gguf", "Q4_0", progress=False)
    with pytest.raises(ValueError, match="is already Q"):
        quantize_file(q4, tmp_path / "again.gguf", "Q8_0", progress=False)
    with pytest.raises(ValueError, match="Unknown quantization type"):
        quantize_file(f16, tmp_path / "x.gguf", "Q3_K_XS", progress=False)


def test_convert_and_quantize_from_the_command_line(f16, tmp_path):
    hf = f16.parent / "hf"
    result = cli("convert", str(hf), "-o", str(tmp_path / "c.gguf"), "--outtype", "bf16")
    assert result.returncode == 0, result.stderr
    result = cli("quantize", str(tmp_path / "c.gguf"), str(tmp_path / "q.gguf"),
                 "--type", "Q4_K_M")
    assert result.returncode == 0, result.stderr
    shown = cli("show", str(tmp_path / "q.gguf")).stdout
    assert "qwen3" in shown and "Q4_K_M" in shown
    bad = cli("convert", str(tmp_path))
    assert bad.returncode == 1 and "no config.json" in bad.stderr


def test_a_mixture_of_experts_quantizes_by_layer(backend, tmp_path):
    hf = checkpoint("llama4", tmp_path / "hf", hidden_size=256, intermediate_size=256,
                    intermediate_size_mlp=512, head_dim=64, num_hidden_layers=8)
    f16 = convert(hf, tmp_path / "f16.gguf", "f16", progress=False)
    out = quantize_file(f16, tmp_path / "q.gguf", "Q4_K_M", progress=False)
    types = {t.name: pyggml.dtypes.type_name(t.type).upper() for t in Header(out).tensors}
    # MoE layers 1, 3, 5, 7 are counted as four ffn_down layers: use_more_bits(i, 8)
    assert [types[f"blk.{i}.ffn_down_exps.weight"] for i in (1, 3, 5, 7)] == \
        ["Q6_K" if use_more_bits(i, 8) else "Q4_K" for i in (1, 3, 5, 7)]
    assert types["blk.1.ffn_gate_inp.weight"] == "F32"
    assert types["blk.1.ffn_gate_exps.weight"] == "Q4_K"
    assert np.isfinite(logits(out, backend)).all()


def test_gemma4_with_experts_and_per_layer_embeddings_quantizes(backend, tmp_path):
    for kind in ("gemma4", "gemma4_moe"):
        hf = checkpoint(kind, tmp_path / kind, hidden_size=256, intermediate_size=256,
                        moe_intermediate_size=256)
        f16 = convert(hf, tmp_path / f"{kind}.f16.gguf", "f16", progress=False)
        out = quantize_file(f16, tmp_path / f"{kind}.q.gguf", "Q4_K_M", progress=False)
        types = {t.name: pyggml.dtypes.type_name(t.type).upper() for t in Header(out).tensors}
        assert types["blk.0.attn_q.weight"] == "Q4_K"
        assert types["rope_freqs.weight"] == "F32"
        assert np.isfinite(logits(out, backend)).all()
    assert types["blk.0.ffn_gate_up_exps.weight"] == "Q4_K"
    assert types["blk.0.ffn_gate_inp.weight"] == types["blk.0.ffn_down_exps.scale"] == "F32"


def test_qwen35_quantizes_as_llama_cpp_quantizes_it(backend, tmp_path):
    """The DeltaNet's convolution kernel stays F32 (ggml's ssm_conv reads F32), its fused
    attn_qkv ranks with attn_v (one a layer either way), 1-D tensors stay F32."""
    hf = checkpoint("qwen3_5", tmp_path / "hf", hidden_size=256, intermediate_size=512,
                    linear_key_head_dim=64, linear_value_head_dim=64, head_dim=64)
    f16 = convert(hf, tmp_path / "f16.gguf", "f16", progress=False)
    out = quantize_file(f16, tmp_path / "q.gguf", "Q4_K_M", progress=False)
    types = {t.name: pyggml.dtypes.type_name(t.type).upper() for t in Header(out).tensors}
    assert types["blk.0.ssm_conv1d.weight"] == types["blk.0.ssm_a"] == "F32"
    assert types["blk.0.ssm_dt.bias"] == types["blk.0.ssm_norm.weight"] == "F32"
    assert [types[f"blk.{i}.attn_qkv.weight" if i % 4 != 3 else f"blk.{i}.attn_v.weight"]
            for i in range(8)] == ["Q6_K" if use_more_bits(i, 8) else "Q4_K" for i in range(8)]
    assert types["blk.1.ssm_alpha.weight"] == types["blk.1.attn_gate.weight"] == "Q4_K"
    assert np.isfinite(logits(out, backend)).all()
