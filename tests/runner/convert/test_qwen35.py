"""Qwen 3.5 (dense and MoE) and Qwen3-Next, converted from tiny transformers checkpoints:
the logits of a prompt, of the same prompt in chunks (the recurrent states carried from
batch to batch), of two sequences of different lengths in one batch, of a fork, and through
the engine: a second turn resumed from a checkpoint, a context shift.

Tolerance: transformers' own float32 forward (its chunked delta rule) differs from its
float64 one by 3e-4 on these models (its MoE experts' float32 kernel by 1.2e-3); ours differs
from its float32 by at most 4.4e-4 (measured 2026-11-28), so the comparisons allow 1e-3 on
logits of magnitude 7. (The DeltaNet's L2 norm takes transformers' fixed eps of 1e-6; with
the tiny models' rms_norm_eps of 1e-5 there instead, as llama.cpp's graph takes it, the
error grows to 1.5e-3 to 3.4e-3 through the recurrence.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

import pyggml
from runner.convert import convert
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.kvcache import HybridCache, hybrid, new_cache
from runner.loading.loader import load_model

from tests.support.architectures import QWEN35_ARCHITECTURE_OF
from tests.support.hf_released import with_mtp_head
from tests.support.hf_tiny import checkpoint
from tests.support.parity import PROMPT, reference

KINDS = list(QWEN35_ARCHITECTURE_OF)
TOLERANCE = 1e-3


@pytest.fixture(scope="module", params=KINDS)
def converted(request, tmp_path_factory):
    """(kind, HF directory, GGUF path, prompt ids, transformers' logits)."""
    from transformers import AutoTokenizer

    directory = tmp_path_factory.mktemp(request.param)
    hf = checkpoint(request.param, directory / "hf")
    path = convert(hf, directory / "model.gguf", "f32", progress=False)
    ids = AutoTokenizer.from_pretrained(hf)(PROMPT)["input_ids"]
    return request.param, hf, path, ids, reference(hf, ids)


def executor(path, sequences: int = 2, checkpoints: int | None = None):
    backend = pyggml.cpu_backend(threads=2)
    model = load_model(path, backend)
    kv = new_cache(model.model.cache_layers(), 256, backend, "f32", False,
                   sequences=sequences, checkpoints=checkpoints)
    return kv, Executor(model.model, kv, pyggml.Scheduler([backend]))


def test_the_file_names_the_architecture_and_its_recurrent_layers(converted):
    import gguf

    from runner.models import model_class
    from runner.models.qwen35 import Qwen35

    kind, _, path, _, _ = converted
    reader = gguf.GGUFReader(path)
    arch = QWEN35_ARCHITECTURE_OF[kind]
    field = reader.fields["general.architecture"]
    assert bytes(field.parts[-1]).decode() == arch
    assert model_class(arch) is Qwen35
    recurrent = reader.fields[f"{arch}.attention.recurrent_layers"]
    assert [bool(recurrent.parts[i][0]) for i in recurrent.data] == \
        [True, True, True, False] * 2


def test_a_prompt_gives_transformers_logits(converted):
    _, _, path, ids, expected = converted
    kv, ex = executor(path)
    assert isinstance(kv, HybridCache)
    logits = ex.logits(Batch.of_sequence(ids, 0, all_logits=True))
    np.testing.assert_allclose(logits, expected, atol=TOLERANCE)


@pytest.mark.parametrize("chunks", [(7, 1, 1), (1, 20), (3, 5, 9)])
def test_chunks_and_decode_steps_carry_the_states(converted, chunks):
    _, _, path, ids, expected = converted
    kv, ex = executor(path)
    start, rows = 0, []
    for size in [*chunks, len(ids) - sum(chunks)]:
        rows.append(ex.logits(Batch.of_sequence(ids[start:start + size], start,
                                                all_logits=True)))
        start += size
    np.testing.assert_allclose(np.concatenate(rows), expected, atol=TOLERANCE)


@pytest.mark.parametrize("row", [None, 16])
def test_two_sequences_of_different_lengths_in_one_batch(converted, row, monkeypatch):
    """A prompt chunk and another sequence's decode step, and a batch of runs out of
    length order: each sequence gets the logits it gets alone. row 16: the states move in
    rows of 16 floats (the tiny states fit one row of the default's)."""
    if row:
        monkeypatch.setattr(hybrid, "pieces", lambda floats: floats // math.gcd(floats, row))
    _, _, path, ids, expected = converted
    kv, ex = executor(path, sequences=3)
    ex.logits(Batch.of_sequence(ids[:10], 0, seq=1))
    ex.logits(Batch.of_sequence(ids[:4], 0, seq=2))
    # seq 1: one token at 10; seq 0: its prompt's first 12; seq 2: five tokens from 4
    tokens = [ids[10], *ids[:12], *ids[4:9]]
    positions = [10, *range(12), *range(4, 9)]
    seqs = [1] * 1 + [0] * 12 + [2] * 5
    batch = Batch(tokens, positions, seqs, outputs=np.arange(len(tokens)))
    logits = ex.logits(batch)
    np.testing.assert_allclose(logits[0], expected[10], atol=TOLERANCE)
    np.testing.assert_allclose(logits[1:13], expected[:12], atol=TOLERANCE)
    np.testing.assert_allclose(logits[13:], expected[4:9], atol=TOLERANCE)


def test_a_fork_shares_the_state_and_goes_its_own_way(converted):
    _, _, path, ids, expected = converted
    kv, ex = executor(path)
    ex.logits(Batch.of_sequence(ids[:12], 0, seq=0))
    kv.copy_prefix(0, 1, 12)
    fork = ex.logits(Batch.of_sequence(ids[12:20], 12, seq=1, all_logits=True))
    np.testing.assert_allclose(fork, expected[12:20], atol=TOLERANCE)
    own = ex.logits(Batch.of_sequence(ids[12:14], 12, seq=0, all_logits=True))
    np.testing.assert_allclose(own, expected[12:14], atol=TOLERANCE)


def test_rolling_back_to_a_checkpoint_resumes_exactly(converted):
    _, _, path, ids, expected = converted
    kv, ex = executor(path, checkpoints=2)
    ex.logits(Batch.of_sequence(ids[:9], 0))
    assert kv.checkpoint(0, 9)
    for start in range(9, 15):                       # decode steps past the checkpoint
        ex.logits(Batch.of_sequence(ids[start:start + 1], start))
    assert kv.rollback_point(0, 12) == 9             # the states of 10..14 are gone but
    kv.remove(0, 12)                                 # one step back (14) and the newest
    assert kv.states.positions(0) == [0, 9]
    again = ex.logits(Batch.of_sequence(ids[9:20], 9, all_logits=True))
    np.testing.assert_allclose(again, expected[9:20], atol=TOLERANCE)


def test_a_range_cannot_be_dropped_from_a_recurrence(converted):
    _, _, path, ids, _ = converted
    kv, ex = executor(path)
    ex.logits(Batch.of_sequence(ids[:9], 0))
    with pytest.raises(ValueError, match="cannot drop a range"):
        kv.remove(0, 2, 4)


def test_the_engine_resumes_a_second_turn_from_its_checkpoints(converted):
    """A chat's second turn shares the first's prompt up to its generation prompt: it is
    resumed there (the checkpoint at the prompt's last special tokens), and the
    greedy reply is the one a fresh model gives."""
    import runner

    kind, hf, path, _, _ = converted
    first = "<|im_start|>user\nThe capital of France<|im_end|>\n<|im_start|>assistant\n<think>\n"
    with runner.load(str(path), num_ctx=256, kv_cache_type="f32", flash_attn=False) as model:
        model.generate(first, stream=False, temperature=0, num_predict=4)
        assert model.last.prompt_cached_count == 0
        second = first.removesuffix("<think>\n") + "Paris.<|im_end|>\n<|im_start|>user\n" \
            "And Spain?<|im_end|>\n<|im_start|>assistant\n"
        resumed = model.generate(second, stream=False, temperature=0, num_predict=6)
        cached = model.last.prompt_cached_count
    shared = len(model.tokenize(first.removesuffix("<think>\n")))
    assert cached == shared
    with runner.load(str(path), num_ctx=256, kv_cache_type="f32", flash_attn=False) as fresh:
        assert fresh.generate(second, stream=False, temperature=0, num_predict=6) == resumed


def test_a_full_context_shifts_by_evaluating_the_kept_tokens_again(converted):
    import runner

    _, _, path, ids, _ = converted
    with runner.load(str(path), num_ctx=16, kv_cache_type="f32", flash_attn=False) as model:
        text = model.generate("Paris", stream=False, temperature=0,
                              num_predict=40,
                              num_keep=4)
        # past the context's 16 (a tiny random model may draw its end token later on)
        assert model.last.eval_count > 16
        assert model.last.done_reason == "length" or model.last.eval_count < 40
    assert text


def test_the_checkpoints_option_bounds_them_and_refuses_nonsense(converted):
    import runner

    _, _, path, _, _ = converted
    with runner.load(str(path), num_ctx=64, checkpoints=3) as model:
        assert model.kv.checkpoints == 3
    with pytest.raises(ValueError, match="checkpoints must be an integer in"):
        runner.load(str(path), num_ctx=64, checkpoints=-1)


@pytest.mark.parametrize("key, value", [("ssm.state_size", 8), ("ssm.time_step_rank", 2),
                                        ("ssm.conv_kernel", 3), ("ssm.group_count", 4)])
def test_recurrent_sizes_that_disagree_with_the_tensors_are_refused_naming_the_key(
        converted, tmp_path, key, value):
    from runner.models.base import ModelError

    from tests.support.gguf_edit import rewrite

    kind, _, path, _, _ = converted
    arch = QWEN35_ARCHITECTURE_OF[kind]
    values = {f"{arch}.{key}": value}
    if key in ("ssm.state_size", "ssm.time_step_rank"):      # inner_size agrees with them
        state = 8 if key == "ssm.state_size" else 16
        heads = 2 if key == "ssm.time_step_rank" else 4
        values[f"{arch}.ssm.inner_size"] = state * heads
    bad = rewrite(path, tmp_path / "bad.gguf", values=values)
    with pytest.raises(ModelError, match=f"{arch}.{key} = {value}.*disagrees"):
        load_model(bad, pyggml.cpu_backend(threads=1))


def test_the_mtp_head_is_kept_as_llama_cpps_converter_keeps_it(converted, tmp_path):
    from pyggml.gguf_reader import Header

    kind, hf, _, ids, expected = converted
    arch = QWEN35_ARCHITECTURE_OF[kind]
    source, tensors = with_mtp_head(hf, tmp_path / "hf")
    path = convert(source, tmp_path / "mtp.gguf", "f32", progress=False)
    header = Header(path)
    meta = header.metadata
    assert meta[f"{arch}.block_count"] == 9 and meta[f"{arch}.nextn_predict_layers"] == 1
    assert list(meta[f"{arch}.attention.recurrent_layers"]) == [True, True, True, False] * 2 + \
        [False]
    import gguf

    found = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(path)).tensors}
    np.testing.assert_array_equal(found["blk.8.nextn.eh_proj.weight"], tensors["mtp.fc.weight"])
    for part, gguf_name in (("pre_fc_norm_embedding", "enorm"), ("pre_fc_norm_hidden", "hnorm"),
                            ("norm", "shared_head_norm")):       # norms +1, as all of them
        np.testing.assert_allclose(found[f"blk.8.nextn.{gguf_name}.weight"],
                                   tensors[f"mtp.{part}.weight"] + 1)
    for name in ("attn_q", "attn_k", "attn_v", "attn_output", "attn_norm", "attn_q_norm"):
        np.testing.assert_array_equal(found[f"blk.8.{name}.weight"],
                                      found[f"blk.3.{name}.weight"])
    # the runner runs the model's layers, not the head's
    kv, ex = executor(path)
    logits = ex.logits(Batch.of_sequence(ids, 0, all_logits=True))
    np.testing.assert_allclose(logits, expected, atol=TOLERANCE)


def ollama_layout(path, target, kind: str):
    """Our file as Ollama's converter writes Qwen 3.5 and Qwen3-Next (convert_qwen3next.go at
    f63eea3d): head_count_kv per layer (0 for a DeltaNet) instead of recurrent_layers, the
    value-head order said (ssm.v_head_reordered), M-RoPE's sections under its three names,
    the decay's bias as blk.N.ssm_dt."""
    from pyggml.gguf_reader import Header

    from tests.support.gguf_edit import rewrite

    arch = QWEN35_ARCHITECTURE_OF[kind]
    meta = Header(path).metadata
    recurrent = list(meta[f"{arch}.attention.recurrent_layers"])
    kv_heads = int(meta[f"{arch}.attention.head_count_kv"])
    keys = {f"{arch}.attention.recurrent_layers": None, f"{arch}.attention.head_count_kv": None}
    values = {f"{arch}.attention.head_count_kv": [0 if r else kv_heads for r in recurrent]}
    if arch != "qwen3next":
        sections = [int(s) for s in meta[f"{arch}.rope.dimension_sections"]][:3]
        keys[f"{arch}.rope.dimension_sections"] = None
        values.update({f"{arch}.ssm.v_head_reordered": True, f"{arch}.mrope_sections": sections,
                       f"{arch}.rope.mrope_section": sections,
                       f"{arch}.rope.dimension_sections": sections,
                       f"{arch}.rope.mrope_interleaved": True})
    return rewrite(path, target, keys=keys, values=values, tensors=lambda name, array, _: {
        name.removesuffix(".bias") if name.endswith("ssm_dt.bias") else name: array})


def test_ollamas_files_give_the_same_logits(converted, tmp_path):
    kind, _, path, ids, expected = converted
    theirs = ollama_layout(path, tmp_path / "ollama.gguf", kind)
    _, ex = executor(theirs)
    logits = ex.logits(Batch.of_sequence(ids, 0, all_logits=True))
    np.testing.assert_allclose(logits, expected, atol=TOLERANCE)
