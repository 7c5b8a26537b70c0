"""Gemma 4 12B ("unified") beyond the common parity tests: its text model as llama.cpp's
converter writes it (any Gemma 4's, with the unified config's own defaults), and its
generation_config.json's suppressed tokens, which our greedy decoding never takes, as
transformers' generate() never does."""

from __future__ import annotations

import json
import shutil

import gguf
import numpy as np
import pytest

from pyggml.gguf_reader import Header
from runner.convert import CheckpointError, convert
from runner.engine.batch import Batch
from runner.sample import Sampler, SamplingOptions

from tests.support.parity import PROMPT, exact_gelu_graphs, executor, reference, table_gelu

KIND = "gemma4_unified"
SUPPRESS = "tokenizer.ggml.suppress_tokens"


def test_with_an_exact_gelu_on_both_sides_the_logits_agree_closely(made, backend,
                                                                   monkeypatch):
    """The GELU table is the only approximation (test_parity.py's TOLERANCE): with erf GELU
    in our graph and in transformers the logits agree to 2e-4, as other Gemma 4s'."""
    import torch

    files = made(KIND)
    exact_gelu_graphs(monkeypatch)
    model, run = executor(files["f32"], backend)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    assert np.abs(ours - reference(files["hf"], ids, gelu=torch.nn.GELU())).max() < 2e-4


def test_the_file_has_llama_cpps_keys_and_tensors(made):
    """The text model as any Gemma 4's (gemma4: one KV head on full layers, whose V is
    K, no per-layer embeddings, no experts, no sharing) and the suppressed tokens as
    llama.cpp's converter writes them: generation_config.json's list, an INT32 array."""
    files = made(KIND)
    header = Header(files["f32"])
    meta = header.metadata
    assert meta["general.architecture"] == "gemma4"
    generation = json.loads((files["hf"] / "generation_config.json").read_text())
    assert meta[SUPPRESS] == generation["suppress_tokens"] == [1]      # <|turn>
    assert header.value_types[SUPPRESS] == (gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32)
    assert meta["gemma4.attention.head_count_kv"] == [2, 2, 2, 1, 2, 1]
    assert meta["gemma4.embedding_length_per_layer_input"] == 0
    assert meta["gemma4.attention.shared_kv_layers"] == 0
    assert meta["gemma4.attention.bidirectional_vision"] is True
    names = {t.name for t in header.tensors}
    assert "blk.3.attn_v.weight" not in names and "blk.0.attn_v.weight" in names
    assert "blk.0.layer_output_scale.weight" in names
    assert not {n for n in names if "per_layer" in n or "exps" in n or "inp_gate" in n}


def edited(made, tmp_path, config=None, generation=None):
    """A copy of the tiny checkpoint with keys of its text config and its generation
    config replaced (a value None: the key left out)."""
    hf = tmp_path / "hf"
    shutil.copytree(made(KIND)["hf"], hf)
    for name, part, changes in (("config.json", "text_config", config),
                                ("generation_config.json", None, generation)):
        whole = json.loads((hf / name).read_text())
        target = whole[part] if part else whole
        for key, value in (changes or {}).items():
            target.pop(key, None)
            if value is not None:
                target[key] = value
        (hf / name).write_text(json.dumps(whole))
    return hf


def test_what_config_json_leaves_out_takes_the_unified_configs_defaults(made, tmp_path):
    """transformers' Gemma4UnifiedTextConfig defaults differ from Gemma 4's: a window of
    1024 (not 512), 262,144 positions, images seen both ways on sliding layers."""
    hf = edited(made, tmp_path, config=dict(sliding_window=None, max_position_embeddings=None,
                                            use_bidirectional_attention=None))
    meta = Header(convert(hf, tmp_path / "a.gguf", "f32", progress=False)).metadata
    assert meta["gemma4.attention.sliding_window"] == 1024
    assert meta["gemma4.context_length"] == 262144
    assert meta["gemma4.attention.bidirectional_vision"] is True
    config = json.loads((hf / "config.json").read_text())
    config["text_config"]["use_bidirectional_attention"] = None      # said: none
    (hf / "config.json").write_text(json.dumps(config))
    meta = Header(convert(hf, tmp_path / "b.gguf", "f32", progress=False)).metadata
    assert "gemma4.attention.bidirectional_vision" not in meta


@pytest.mark.parametrize("suppress, written", [(None, None), ([], None),
                                               ([5, 900000], [5, 900000])])
def test_suppressed_tokens_are_written_as_given(made, tmp_path, suppress, written):
    """No list or an empty one writes no key (llama.cpp's converter cannot write an empty
    array); ids beyond the vocabulary are written (llama.cpp's and our loaders drop them)."""
    hf = edited(made, tmp_path, generation={"suppress_tokens": suppress})
    meta = Header(convert(hf, tmp_path / "s.gguf", "f32", progress=False)).metadata
    assert meta.get(SUPPRESS) == written


@pytest.mark.parametrize("suppress", ["<|turn>", [1.5], [True], [2**31]])
def test_suppressed_tokens_that_are_not_ids_are_refused(made, tmp_path, suppress):
    hf = edited(made, tmp_path, generation={"suppress_tokens": suppress})
    with pytest.raises(CheckpointError, match=r"^generation_config.json's suppress_tokens is "
                                              r".*, not a list of token ids\.$"):
        convert(hf, tmp_path / "s.gguf", "f32", progress=False)


def test_greedy_decoding_skips_the_suppressed_tokens_as_transformers_generate_does(
        made, backend, tmp_path):
    """The token transformers' model would pick first is suppressed too: our greedy
    sampler (over the converted file's vocabulary) and transformers' generate() with the
    same generation_config.json continue alike, neither ever taking a suppressed one."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.activations import GELUTanh

    files = made(KIND)
    model, run = executor(files["f32"], backend)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    first = int(reference(files["hf"], ids)[-1].argmax())
    suppressed = [1, first]
    hf = edited(made, tmp_path, generation={"suppress_tokens": suppressed})
    model, run = executor(convert(hf, tmp_path / "s.gguf", "f32", progress=False), backend)
    sampler = Sampler(SamplingOptions(temperature=0), model.tokenizer.vocab.suppressed)
    logits = run.logits(Batch.of_sequence(ids, 0))[-1]
    ours = []
    for position in range(len(ids), len(ids) + 8):
        ours.append(sampler.sample(logits))
        logits = run.logits(Batch.of_sequence(ours[-1:], position))[-1]
    theirs_model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    for module in theirs_model.modules():
        if isinstance(getattr(module, "act_fn", None), GELUTanh):
            module.act_fn = table_gelu()          # ggml's GELU, as reference() rounds it
    prompt = torch.tensor([ids])
    with torch.no_grad():            # the mask said: BOS is also the pad token (0) here
        theirs = theirs_model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                       max_new_tokens=8, min_new_tokens=8,
                                       do_sample=False)[0, len(ids):].tolist()
    assert ours == theirs and not set(ours) & set(suppressed)


def test_a_checkpoint_without_its_towers_has_no_projector_to_write(made, tmp_path):
    """The table's tiny checkpoint leaves the towers out (vision/test_gemma4_unified.py
    converts them): --mmproj says there is nothing to write, not a bare AttributeError."""
    with pytest.raises(CheckpointError, match="'gemma4_unified' checkpoint has neither a "
                                              "vision nor an audio tower"):
        convert(made(KIND)["hf"], tmp_path / "t.gguf", "f32", progress=False,
                mmproj=tmp_path / "mmproj.gguf")
