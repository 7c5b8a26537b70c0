"""Tiny Hugging Face models of each converted architecture, converted by us and run by us,
against transformers' own forward pass."""

from __future__ import annotations

import json

import numpy as np
import pytest

import pyggml
from runner.convert import CheckpointError, convert
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.kvcache import CausalCache
from runner.loading.loader import load_model
from runner.models import model_class

from tests.support.architectures import TEXT_ARCHITECTURE_OF
from tests.support.corpus import corpus
from tests.support.hf_tiny import OLMO3_YARN, SPECIAL, checkpoint
from tests.support.parity import PROMPT, executor, reference

KINDS = list(TEXT_ARCHITECTURE_OF)
# f32 tolerance on the logits. The reference rounds GELU as ggml's CPU backend does (see
# parity.py), but where transformers' and ggml's inputs to it differ in the last bit and
# straddle an FP16 rounding boundary its output still jumps by ~1e-3, and attention carries
# the jump to every later token. Gemma 4's tiny models, with five GELUs per layer, unscaled
# attention and norm weights of 1 +- 0.3, reach 7e-3 that way (test_gemma4.py shows the
# rest agrees to 2e-4 with an exact GELU on both sides). Gemma 3's one GELU a layer
# reaches 1.04e-3 on ggml's AVX kernels (a ggml built without AVX2; under 1e-3 with AVX2).
# Gemma 3n's activation sparsity (a cutoff at mean + 1.645 std of each FFN gate row) makes
# a tiny random model ill-conditioned: at the weights' usual spread (0.1) transformers' own
# float32 and float64 logits differ by 3e-3; at 0.05, as made here, by 2.7e-4 (ours with an
# exact GELU on both sides: 3.2e-4 from the float32 reference; with ggml's GELU table, two
# a layer over 22 layers, 5.4e-3, the table's jumps as in Gemma 4).
TOLERANCE = {"gemma2": 2e-3, "gemma3": 2e-3, "gemma4": 1e-2, "gemma4_moe": 1e-2,
             "gemma4_unified": 1e-2, "gemma3n": 1e-2}
# the shift test's bound on cached keys (Gemmas' GELU table: 2e-4); Gemma 3n's sparsity
# carries the rotations' rounding at other positions to 1.8e-3 in its deepest layers
KEY_TOLERANCE = {"gemma3n": 5e-3}
# f16 weights and cache: the bound on the max logit difference. Gemma 4's unscaled
# attention over those norm weights puts scores near 50, which turns f16 rounding into ~0.1
# of logit (0.008 with its Q/K norms scaled by 0.3; 0.16 in Gemma 4 12B's kind). Its MoE
# router's near-ties on random weights flip under that rounding (another expert: ~0.5 of
# logit, carried by attention to the later positions), so only the logits' correlation is
# held there (None: no bound; measured 0.991); Gemma 3n's sparsity cutoffs move under f16
# weights likewise (0.24)
F16_TOLERANCE = {"gemma4": 0.15, "gemma4_moe": None, "gemma4_unified": 0.2,
                 "gemma3n": None}


@pytest.mark.parametrize("kind", KINDS)
def test_full_prompt_logits_match_transformers(made, backend, kind):
    files = made(kind)
    model, run = executor(files["f32"], backend)
    assert type(model.model) is model_class(TEXT_ARCHITECTURE_OF[kind])
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    expected = reference(files["hf"], ids)
    assert np.abs(ours - expected).max() < TOLERANCE.get(kind, 1e-3)
    half = made(kind, "f16")["f16"]
    model16, run16 = executor(half, backend, "f16")
    ours16 = run16.logits(Batch.of_sequence(ids, 0, all_logits=True))
    error16, bound = np.abs(ours16 - expected).max(), F16_TOLERANCE.get(kind, 0.05)
    if bound is not None:
        assert error16 < bound, f"f16: max logit difference {error16:.4f}"
        assert (ours16.argmax(axis=1) == expected.argmax(axis=1)).mean() >= 0.9
    else:                                       # only the logits' overall agreement holds
        correlation = np.corrcoef(ours16.ravel(), expected.ravel())[0, 1]
        assert correlation > 0.98, f"f16: correlation {correlation:.4f}, max {error16:.4f}"


@pytest.mark.parametrize("kind", KINDS)
def test_decoding_step_by_step_matches(made, backend, kind):
    files = made(kind)
    model, run = executor(files["f32"], backend)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    expected = reference(files["hf"], ids)
    for position, token in enumerate(ids):
        step = run.logits(Batch.of_sequence([token], position))[-1]
        assert np.abs(step - expected[position]).max() < TOLERANCE.get(kind, 1e-3), position


@pytest.mark.parametrize("kind", KINDS)
def test_two_sequences_in_one_batch(made, backend, kind):
    files = made(kind)
    model, run = executor(files["f32"], backend)
    a = model.tokenizer.encode(PROMPT, add_special=True)
    b = model.tokenizer.encode("Once upon a time, in a land far away", add_special=True)
    batch = Batch(a + b, list(range(len(a))) + list(range(len(b))),
                  [0] * len(a) + [1] * len(b), outputs=range(len(a) + len(b)))
    ours, tolerance = run.logits(batch), TOLERANCE.get(kind, 1e-3)
    assert np.abs(ours[:len(a)] - reference(files["hf"], a)).max() < tolerance
    assert np.abs(ours[len(a):] - reference(files["hf"], b)).max() < tolerance


UNTEMPERED = {"llama4": dict(floor_scale=8192), "ministral3": dict(rope_parameters={
    "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
    "original_max_position_embeddings": 16, "mscale": 1.0, "mscale_all_dim": 1.0,
    "llama_4_scaling_beta": 0.0})}


@pytest.mark.parametrize("kind", KINDS)
def test_shifted_keys_equal_keys_computed_at_the_new_positions(made, backend, kind, tmp_path):
    """A prompt evaluated 16 positions on, then shifted back by 16, leaves each cached layer
    the keys the prompt gets at its own positions (RoPE attends by relative position; each
    kind of layer re-rotates with its own rope; Llama 4's no-RoPE layers are left alone),
    and the next token's logits match. Llama 4 and Mistral 3 are made here without their
    attention temperature (the default floor; no beta): it depends on absolute positions,
    which no shift can undo."""
    files = made(kind) if kind not in UNTEMPERED else \
        {"f32": convert(checkpoint(kind, tmp_path / "hf", **UNTEMPERED[kind]),
                        tmp_path / "untempered.gguf", "f32", progress=False)}
    model, shifted = executor(files["f32"], backend)
    ids = model.tokenizer.encode(PROMPT, add_special=True)[:12]
    shifted.logits(Batch.of_sequence(ids, 16))                  # positions 16..27
    shifted.shift(0, 16, 28, -16)
    fresh = executor(files["f32"], backend)[1]
    fresh.logits(Batch.of_sequence(ids, 0))
    for layer in range(len(shifted.kv.layers)):
        ours, theirs = (run.kv.k[layer].numpy(copy=True)[:len(ids)] for run in (shifted, fresh))
        assert np.abs(ours - theirs).max() < KEY_TOLERANCE.get(kind, 1e-3), layer
    step = ids[:1]
    assert np.abs(shifted.logits(Batch.of_sequence(step, 12))[-1] -
                  fresh.logits(Batch.of_sequence(step, 12))[-1]).max() < \
        TOLERANCE.get(kind, 1e-3)


@pytest.mark.parametrize("kind", KINDS)
def test_tokenizer_ids_match_transformers(made, backend, kind):
    from transformers import AutoTokenizer

    files = made(kind)
    ours = load_model(files["f32"], backend).tokenizer
    theirs = AutoTokenizer.from_pretrained(files["hf"])
    for text in corpus(SPECIAL[kind]):
        assert ours.encode(text, add_special=False) == \
            theirs.encode(text, add_special_tokens=False), text
    assert ours.vocab.eos == theirs.eos_token_id


def test_a_62_layer_gemma3_divides_queries_as_27b_does(tmp_path, backend):
    """Gemma 3 27B divides its queries by sqrt(embd / heads) (168), not by sqrt(head size)
    (128). GGUF has no key for it: llama.cpp and Ollama tell 27B by its 62 layers, and so do
    we. A tiny model with 62 layers and embd / heads = 32 against head size 16: 0.0018 from
    transformers (62 layers of GELU rounding, see TOLERANCE), 2.7 with the head size's."""
    hf = checkpoint("gemma3", tmp_path / "hf", num_hidden_layers=62, num_attention_heads=2,
                    num_key_value_heads=1, query_pre_attn_scalar=32)
    path = convert(hf, tmp_path / "g.gguf", "f32", progress=False)
    model, run = executor(path, backend)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    assert np.abs(ours - reference(hf, ids)).max() < 5e-3
    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps(dict(config, query_pre_attn_scalar=16)))
    with pytest.raises(CheckpointError, match="query_pre_attn_scalar is 16; GGUF cannot "
                                              "record it.*take 32 for a 62-layer model"):
        convert(hf, tmp_path / "h.gguf", "f32", progress=False)


def test_unsupported_missing_and_mismatched_checkpoints(made, tmp_path):
    hf = made("llama")["hf"]
    with pytest.raises(CheckpointError, match="no config.json"):
        convert(tmp_path, tmp_path / "x.gguf", progress=False)
    bad = tmp_path / "bad"
    bad.mkdir()
    for file in hf.iterdir():
        (bad / file.name).symlink_to(file)
    (bad / "config.json").unlink()
    config = json.loads((hf / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps(dict(config, model_type="mamba")))
    with pytest.raises(CheckpointError, match="'mamba' is not supported; supported: llama"):
        convert(bad, tmp_path / "x.gguf", progress=False)
    (bad / "config.json").write_text(json.dumps(dict(config, intermediate_size=96)))
    with pytest.raises(CheckpointError, match="implies"):
        convert(bad, tmp_path / "x.gguf", progress=False)
    (bad / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        convert(bad, tmp_path / "x.gguf", progress=False)
    with pytest.raises(ValueError, match="Unknown output type"):
        convert(hf, tmp_path / "x.gguf", "q3", progress=False)


def test_a_sentencepiece_tokenizer_gives_sentencepieces_ids(tmp_path, backend):
    import sentencepiece

    from tests.support.hf_tiny import sentencepiece_checkpoint

    hf = sentencepiece_checkpoint(tmp_path)
    path = convert(hf, tmp_path / "spm.gguf", "f32", progress=False)
    ours = load_model(path, backend).tokenizer
    theirs = sentencepiece.SentencePieceProcessor(model_file=str(hf / "tokenizer.model"))
    assert ours.vocab.model == "llama" and ours.vocab.bos == 1 and ours.vocab.eos == 2
    for text in corpus([]):
        assert ours.encode(text, add_special=False) == theirs.encode(text), text
    assert ours.encode("Hi", add_special=True)[0] == 1


def test_llama3_rope_scaling_becomes_frequency_factors(tmp_path, backend):
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
               "rope_theta": 500000.0}
    hf = checkpoint("llama", tmp_path / "hf", rope_parameters=scaling)
    path = convert(hf, tmp_path / "l3.gguf", "f32", progress=False)
    model, run = executor(path, backend)
    assert any(t.name == "rope_freqs.weight" for t in model.file.header.tensors)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    assert np.abs(ours - reference(hf, ids)).max() < 1e-3


def test_olmo3_yarn_on_its_global_layers_matches_transformers(tmp_path, backend):
    hf = checkpoint("olmo3", tmp_path / "hf", **OLMO3_YARN)
    path = convert(hf, tmp_path / "olmo3.gguf", "f32", progress=False)
    model, run = executor(path, backend)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    assert len(ids) > 16                                   # past the original context
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    expected = reference(hf, ids)
    assert np.abs(ours - expected).max() < 1e-3
    unscaled = reference(checkpoint("olmo3", tmp_path / "plain"), ids)
    assert np.abs(unscaled - expected).max() > 1e-2       # the scaling shows in the logits
    with pytest.raises(CheckpointError, match="sliding layers"):
        convert(checkpoint("olmo3", tmp_path / "bad", max_position_embeddings=64,
                           rope_parameters={name: OLMO3_YARN["rope_parameters"]["full_attention"]
                                            for name in ("full_attention", "sliding_attention")}),
                tmp_path / "bad.gguf", "f32", progress=False)


def test_sharded_checkpoints_generation_eos_and_chat_template(tmp_path, backend):
    import torch  # noqa: F401  (save_pretrained shards through torch)
    from transformers import AutoModelForCausalLM

    hf = checkpoint("qwen2", tmp_path / "hf")
    model = AutoModelForCausalLM.from_pretrained(hf)
    model.save_pretrained(tmp_path / "sharded", max_shard_size="100KB")
    sharded = tmp_path / "sharded"
    assert (sharded / "model.safetensors.index.json").exists()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (sharded / name).write_bytes((hf / name).read_bytes())
    config = json.loads((sharded / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}<|im_end|>{% endfor %}"
    (sharded / "tokenizer_config.json").write_text(json.dumps(config))
    ids = {t: i for i, t in enumerate(load_model(made_path(hf, tmp_path), backend)
                                      .tokenizer.vocab.tokens)}
    (sharded / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]]}))
    path = convert(sharded, tmp_path / "sharded.gguf", "f32", progress=False)
    loaded = load_model(path, backend)
    meta = loaded.metadata
    assert meta["tokenizer.ggml.eos_token_id"] == ids["<|im_end|>"]       # the list wins
    assert meta["tokenizer.ggml.eot_token_id"] == ids["<|endoftext|>"]
    assert meta["tokenizer.chat_template"] == config["chat_template"]
    kv = CausalCache(loaded.model.cache_layers(), 256, backend, "f32", False)
    tokens = loaded.tokenizer.encode(PROMPT, add_special=True)
    ours = Executor(loaded.model, kv, pyggml.Scheduler([backend])).logits(
        Batch.of_sequence(tokens, 0, all_logits=True))
    assert np.abs(ours - reference(hf, tokens)).max() < 1e-3


def made_path(hf, tmp_path):
    return convert(hf, tmp_path / "plain.gguf", "f32", progress=False)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_yarn_rope_scaling_is_written_and_runs_as_transformers(tmp_path, backend, kind):
    """YaRN (Qwen 2.5's long-context setting) becomes llama.cpp's rope.scaling keys; it
    changes every position's rotation, so a converter that dropped it (ours did) gave other
    logits from the first token on. 4x over an original context of 16."""
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
               "rope_theta": 10000.0}
    hf = checkpoint(kind, tmp_path / "hf", rope_parameters=scaling, max_position_embeddings=64)
    path = convert(hf, tmp_path / "yarn.gguf", "f32", progress=False)
    model, run = executor(path, backend)
    assert model.model.config.rope.ext_factor == 1.0
    assert model.model.config.rope.original_context == 16
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    assert np.abs(ours - reference(hf, ids)).max() < 1e-3


def test_unknown_rope_scalings_are_refused(tmp_path):
    for scaling in ({"rope_type": "longrope", "factor": 4.0, "rope_theta": 10000.0},
                    {"rope_type": "yarn", "factor": 4.0, "mscale": 0.7, "rope_theta": 1e4}):
        hf = checkpoint("llama", tmp_path / scaling.get("mscale", "x").__str__(),
                        rope_parameters=dict(scaling, short_factor=[1.0] * 8,
                                             long_factor=[1.0] * 8))
        with pytest.raises(CheckpointError, match="not supported"):
            convert(hf, tmp_path / "x.gguf", "f32", progress=False)


def test_gemma3_scales_only_its_global_layers_positions(tmp_path, backend):
    """Gemma 3 4B to 27B scale positions by 1/8 on their global layers only (linear); the
    sliding layers keep plain positions, as in transformers and llama.cpp (ours scaled both:
    2.7 off transformers here)."""
    rope = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    hf = checkpoint("gemma3", tmp_path / "hf", rope_parameters=rope)
    path = convert(hf, tmp_path / "g.gguf", "f32", progress=False)
    model, run = executor(path, backend)
    config = model.model.config
    assert (config.rope.freq_scale, config.local_rope.freq_scale) == (0.125, 1.0)
    ids = model.tokenizer.encode(PROMPT, add_special=True)
    ours = run.logits(Batch.of_sequence(ids, 0, all_logits=True))
    assert np.abs(ours - reference(hf, ids)).max() < 1e-3
