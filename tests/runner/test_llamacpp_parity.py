"""Against llama.cpp itself (llama-cpp-python 0.3.36, an optional extra that compiles for
about 10 minutes): identical token ids on the whole corpus and for every BPE pre-tokenizer,
and logits identical bit for bit, with and without repacked weights, flash attention off
and on; and our converter's Gemma 4 files run the same in it. Slow; skipped when
llama-cpp-python is not installed."""

from __future__ import annotations

import numpy as np
import pytest

import pyggml
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.kvcache import CausalCache, new_cache
from runner.tokenizer.bpe import PRE_TOKENIZERS

from tests.support.corpus import corpus
from tests.support.hf_tiny import EXAONE4_SMALL, OLMO3_YARN, PHI3_ROPE

from .conftest import MODELS, SPECIAL

pytestmark = pytest.mark.slow
llama_cpp = pytest.importorskip("llama_cpp")


def reference(path, **kwargs):
    return llama_cpp.Llama(model_path=str(path), verbose=False, n_threads=2, **kwargs)


@pytest.mark.parametrize("key", MODELS)
def test_token_ids_equal_llama_cpp(loaded, model_paths, key):
    llm = reference(model_paths[key], vocab_only=True)
    ours = loaded(key).tokenizer
    for text in corpus(SPECIAL[key]):
        assert ours.encode(text, add_special=False) == \
            llm.tokenize(text.encode(), add_bos=False, special=True), text


# Long enough (about 110 tokens) that a small difference in how attention rounds grows past
# the last bit through the layers: scaling Gemma 3's queries before the product, as llama.cpp
# does, rather than in the softmax moved its logits by 0.4 at 31 tokens and left 14 identical.
PARAGRAPH = ("The capital of France is Paris, a city on the Seine that has been the seat of "
             "the kings, the revolution and the republics. Its museums hold paintings from "
             "every century, its cafes fill with students and travellers, and its bridges "
             "join the two banks where the old university and the cathedral stand. In "
             "spring the gardens open, the markets sell cherries and asparagus, and the long "
             "evenings bring people out along the river until late.")


@pytest.mark.parametrize("repack", [True, False])
@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("key", MODELS)
def test_logits_equal_llama_cpp(model_paths, backend, key, flash, repack):
    """Bit for bit, in llama.cpp's default (repacked CPU weights) and without repacking."""
    from llama_cpp._internals import LlamaContext, LlamaModel

    from runner.loading.loader import load_model

    llm = reference(model_paths[key], n_ctx=256, logits_all=True, flash_attn=flash,
                    n_batch=512)
    params = llama_cpp.llama_model_default_params()
    params.use_extra_bufts = repack
    llm._model = LlamaModel(path_model=str(model_paths[key]), params=params, verbose=False)
    llm._ctx = LlamaContext(model=llm._model, params=llm.context_params, verbose=False)
    model = load_model(model_paths[key], backend, repack=repack)
    ids = model.tokenizer.encode(PARAGRAPH)
    ours, theirs = both_logits(llm, model, backend, ids, "f16", flash)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("cache_type", ["q8_0", "q4_0"])
@pytest.mark.parametrize("key", MODELS)
def test_quantized_cache_logits_equal_llama_cpp(model_paths, backend, key, cache_type):
    """llama.cpp rotates a quantized cache's keys, queries and values (Walsh-Hadamard, its
    attn_rot); without the same rotation our logits were 1.6 to 13 off. Bit for bit through
    the prompt, decoding steps, and a context shift (which rotates keys back to re-rope
    them) followed by more steps."""
    from runner.loading.loader import load_model

    ggml_type = {"q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0}[cache_type]
    llm = reference(model_paths[key], n_ctx=256, logits_all=True, flash_attn=True,
                    n_batch=512, type_k=ggml_type, type_v=ggml_type)
    model = load_model(model_paths[key], backend)
    ids = model.tokenizer.encode(PARAGRAPH)
    kv = CausalCache(model.model.cache_layers(), 256, backend, cache_type, True)
    executor = Executor(model.model, kv, pyggml.Scheduler([backend]))
    ours = executor.logits(Batch.of_sequence(ids, 0, all_logits=True))
    llm.eval(ids)
    np.testing.assert_array_equal(ours, np.array(llm.scores[:len(ids)], dtype=np.float32))
    position, keep, discard = len(ids), 4, 40
    for step in range(6):
        if step == 3:                                   # drop positions 4-43, shift the rest
            memory = llama_cpp.llama_get_memory(llm._ctx.ctx)
            llama_cpp.llama_memory_seq_rm(memory, 0, keep, keep + discard)
            llama_cpp.llama_memory_seq_add(memory, 0, keep + discard, -1, -discard)
            llm.n_tokens -= discard
            kv.remove(0, keep, keep + discard)
            executor.shift(0, keep + discard, position, -discard)
            position -= discard
        token = int(ours[-1].argmax())
        ours = executor.logits(Batch.of_sequence([token], position))
        llm.eval([token])
        np.testing.assert_array_equal(ours[-1], np.asarray(llm.scores[llm.n_tokens - 1],
                                                           dtype=np.float32), f"step {step}")
        position += 1


def both_logits(llm, model, backend, ids, cache_type: str, flash: bool):
    """(ours, llama.cpp's) logits for every position of the prompt ids."""
    llm.eval(ids)
    theirs = np.array(llm.scores[:len(ids)], dtype=np.float32)
    kv = new_cache(model.model.cache_layers(), 256, backend, cache_type, flash)
    ours = Executor(model.model, kv, pyggml.Scheduler([backend])).logits(
        Batch.of_sequence(ids, 0, all_logits=True))
    return ours, theirs


def trained_bpe_gguf(path, pre: str):
    """A byte-level BPE vocabulary trained offline on the corpus and the mixed scripts, in a
    tiny llama GGUF."""
    import gguf
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from tests.support.tiny import llama_tensors, write_llama

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<s>", "</s>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator((corpus(["<|im_end|>"]) + MIXED_SCRIPTS) * 3, trainer)
    state = __import__("json").loads(tokenizer.to_str())["model"]
    vocab = sorted(state["vocab"].items(), key=lambda item: item[1])
    tokens = [token for token, _ in vocab]
    merges = [m if isinstance(m, str) else " ".join(m) for m in state["merges"]]
    types = [gguf.TokenType.CONTROL if t in ("<s>", "</s>", "<|im_end|>") else
             gguf.TokenType.NORMAL for t in tokens]
    tensors = llama_tensors(np.random.default_rng(0), layers=1)
    tensors["token_embd.weight"] = np.zeros((len(tokens), 32), np.float32)
    tensors["output.weight"] = np.zeros((len(tokens), 32), np.float32)
    write_llama(path, tensors, tokenizer=dict(tokens=tokens, merges=merges, types=types,
                                              pre=pre))
    return path


@pytest.mark.parametrize("pre", sorted(PRE_TOKENIZERS))
def test_bpe_pre_tokenizers_equal_llama_cpp(tmp_path, backend, pre):
    from runner.loading.loader import load_model

    path = trained_bpe_gguf(tmp_path / f"{pre}.gguf", pre)
    ours = load_model(path, backend).tokenizer
    llm = reference(path, vocab_only=True)
    for text in corpus(["<|im_end|>"]) + MIXED_SCRIPTS:
        assert ours.encode(text, add_special=False) == \
            llm.tokenize(text.encode(), add_bos=False, special=True), (pre, text)


@pytest.mark.parametrize("setting", ["nfkc", "identity"])
def test_unigram_tokenizer_equals_llama_cpp(tmp_path, backend, setting):
    """XLM-RoBERTa-style (t5) vocabularies trained with sentencepiece, with and without its
    NFKC map and space merging: the same ids as llama.cpp, special tokens and EOS
    included."""
    from runner.loading.loader import load_model

    from tests.support.unigram import HARD, SETTINGS, USER_DEFINED, unigram_gguf

    path, _ = unigram_gguf(tmp_path, *SETTINGS[setting])
    ours = load_model(path, backend).tokenizer
    llm = reference(path, vocab_only=True)
    for text in corpus([USER_DEFINED, "</s>"]) + HARD + MIXED_SCRIPTS:
        for add_special, parse_special in ((False, True), (True, True), (False, False)):
            assert ours.encode(text, add_special, parse_special) == llm.tokenize(
                text.encode(), add_bos=add_special, special=parse_special), (text, add_special)


# letters against Han characters, digits in long runs and after letters, cased words, long
# space runs, Korean and full-width punctuation: where Kimi K2's, DeepSeek's, SuperBPE's,
# AFMoE's, Jais 2's and Youtu's splits differ from the others (camelCase repeated so that
# the vocabulary learns merges across the case change)
MIXED_SCRIPTS = ["中文abc和English混合Text", "漢字かなカナMixed漢字", "1234567 and 12345678901",
                 "ÀÉÎõü中Ωmega ΣΑΣ日本",
                 "x1abc v2.0 abc1234def 1,000,000 HTTPServer" + " camelCase" * 40,
                 "a" + " " * 40 + "b\t\t c\n\n\n  d", "한국어 텍스트！…“引号”：ㄅㄆ",
                 "e\u0301cole n\u0303o 〇〆 ⺀ 々木"]


# name: (kind, config). llama.cpp's llama4 ignores the file's chunk size and attention
# temperature and takes Llama 4 Scout's and Maverick's (8192, floor 8192, scale 0.1): the
# tiny model gets them too. qwen2_yarn: YaRN 4x over an original context of 16.
# gemma3_scaled: global layers' positions scaled by 1/8, the sliding layers' not.
# olmo3_yarn: YaRN on the global layers only.
CONVERTED = {
    **{kind: (kind, {}) for kind in ("llama", "qwen2", "qwen3", "qwen3_moe", "olmo2", "olmo3",
                                     "ministral3", "gemma2", "gemma3", "gemma4",
                                     "gemma4_moe", "deepseek_v2", "deepseek_v3", "gemma3n",
                                     "glm4_moe_lite", "gpt_oss", "gemma4_unified")},
    **{kind: (kind, {}) for kind in ("granite", "granitemoe", "granitemoeshared", "smollm3",
                                     "seed_oss", "mixtral")},
    "llama4": ("llama4", dict(attention_chunk_size=8192, floor_scale=8192, attn_scale=0.1)),
    "qwen2_yarn": ("qwen2", dict(max_position_embeddings=64, rope_parameters={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
        "rope_theta": 10000.0})),
    "olmo3_yarn": ("olmo3", OLMO3_YARN),
    # the first and last layers global: llama.cpp reads the pattern the file holds
    "olmo3_pattern": ("olmo3", dict(layer_types=["full_attention", "sliding_attention",
                                                 "sliding_attention", "full_attention"])),
    "gemma3_scaled": ("gemma3", dict(rope_parameters={            # as Gemma 3 4B to 27B
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
    # the hybrids at the released models' rms_norm_eps (1e-6), which llama.cpp's graph also
    # takes for the DeltaNet's L2 norm (transformers' and ours: a fixed 1e-6)
    **{kind: (kind, dict(rms_norm_eps=1e-6)) for kind in ("qwen3_5", "qwen3_5_moe",
                                                          "qwen3_next")},
    # in a context of 256: LongRoPE's short factors (test_llamacpp_phi3.py: the long ones)
    "phi3": ("phi3", {}),
    "glm4": ("glm4", {}),
    # llama.cpp's command-r reads Q/K norms from files of 64 layers or more only (Command
    # R+'s), and refuses them in others
    "cohere": ("cohere", dict(use_qk_norm=False)),
    "cohere_plus": ("cohere", dict(num_hidden_layers=64)),
    "cohere2": ("cohere2", {}),
    "starcoder2": ("starcoder2", {}),
    # the 32B's kind (64 layers: windows, global layers unrotated) and the 1.2B's
    "exaone4": ("exaone4", {}),
    "exaone4_small": ("exaone4", EXAONE4_SMALL),
}
# the largest logit difference allowed where not 0 (bit for bit); the Qwen 3.5 MoE's and
# Qwen3-Next's experts and shared expert summed in another order (measured 2.3e-5, 3.8e-5)
CONVERTED_TOLERANCE = {"gemma4_moe": 5e-3, "qwen3_5_moe": 1e-4, "qwen3_next": 1e-4}


@pytest.mark.parametrize("name", list(CONVERTED))
def test_converted_models_run_in_llama_cpp_as_in_ours(tmp_path, backend, name):
    """Our converter's files of every architecture it writes are llama.cpp's: it loads them,
    tokenizes the corpus (newline runs, double spaces, byte fallback) as we do, and with an
    f32 cache computes the same logits: bit for bit, Gemma 4's per-layer embeddings, shared
    KV and proportional RoPE and Llama 4's experts and rope-less layers included; within
    5e-3 for Gemma 4's experts (measured 8.7e-4: the order of the routing weights'
    arithmetic differs, and the GELU table can turn that into a jump)."""
    from runner.convert import convert
    from runner.loading.loader import load_model

    from tests.support.hf_tiny import SPECIAL as TINY_SPECIAL
    from tests.support.hf_tiny import checkpoint

    kind, config = CONVERTED[name]
    path = convert(checkpoint(kind, tmp_path / "hf", **config), tmp_path / "f32.gguf", "f32",
                   progress=False)
    model = load_model(path, backend)
    llm = reference(path, n_ctx=256, logits_all=True, flash_attn=False, type_k=0, type_v=0)
    for text in corpus(TINY_SPECIAL[kind]) + ["two  spaces\n\n\nand \u2603"]:
        assert model.tokenizer.encode(text, add_special=False) == \
            llm.tokenize(text.encode(), add_bos=False, special=True), text
    ids = model.tokenizer.encode("The capital of France is Paris.\n\nAnd  then \u2603 more.")
    ours, theirs = both_logits(llm, model, backend, ids, "f32", False)
    assert np.abs(ours - theirs).max() <= CONVERTED_TOLERANCE.get(kind, 0.0)


def test_granite_with_its_rope_switched_off_runs_in_llama_cpp_as_in_ours(tmp_path, backend):
    """granite.rope.scaling.finetuned false: llama.cpp's granite rotates no layer, nor do
    we (bit for bit)."""
    from runner.convert import convert
    from runner.loading.loader import load_model

    from tests.support.gguf_edit import rewrite
    from tests.support.hf_tiny import checkpoint

    path = rewrite(convert(checkpoint("granite", tmp_path / "hf"), tmp_path / "f32.gguf",
                           "f32", progress=False), tmp_path / "nope.gguf",
                   values={"granite.rope.scaling.finetuned": False})
    model = load_model(path, backend)
    llm = reference(path, n_ctx=256, logits_all=True, flash_attn=False, type_k=0, type_v=0)
    ids = model.tokenizer.encode("The capital of France is Paris.\n\nAnd  then \u2603 more.")
    ours, theirs = both_logits(llm, model, backend, ids, "f32", False)
    assert np.abs(ours - theirs).max() == 0.0


def test_gpt_oss_mxfp4_experts_run_and_quantize_in_llama_cpp_as_in_ours(tmp_path, backend):
    """A gpt-oss file whose experts passed through as MXFP4: llama.cpp reads it and computes
    our logits to the bit. Q4_K_M keeps those experts' bytes (llama.cpp's quantizer refuses
    the file: it would requantize them) and gives the other tensors the types llama.cpp
    gives them in the same model with float experts; llama.cpp runs that file as we do."""

    from pyggml.gguf_reader import Header
    from runner.convert import convert
    from runner.convert.quantize import quantize_file
    from runner.loading.loader import load_model

    from tests.support.hf_released import mxfp4_checkpoints

    def run_both(path):
        model = load_model(path, backend)
        llm = reference(path, n_ctx=256, logits_all=True, flash_attn=False, type_k=0,
                        type_v=0)
        ids = model.tokenizer.encode("The capital of France is Paris.\n\nAnd  then \u2603.")
        ours, theirs = both_logits(llm, model, backend, ids, "f32", False)
        assert np.abs(ours - theirs).max() == 0.0

    mxfp4, decoded = mxfp4_checkpoints(tmp_path)
    path = convert(mxfp4, tmp_path / "mxfp4.gguf", "f32", progress=False)
    run_both(path)
    ours = quantize_file(path, tmp_path / "ours.gguf", "Q4_K_M", progress=False)
    float_experts = convert(decoded, tmp_path / "decoded.gguf", "f16", progress=False)
    theirs = llama_cpp_q4_k_m(float_experts, tmp_path / "theirs.gguf")
    source, mine, reference_types = (
        {t.name: t for t in Header(f).tensors} for f in (path, ours, theirs))
    for name, info in mine.items():
        if name.endswith("_exps.weight"):
            assert (info.type, info.n_bytes) == (source[name].type, source[name].n_bytes)
        else:
            assert info.type == reference_types[name].type, name
    run_both(ours)


def test_gpt_oss_sinks_with_flash_attention_equal_llama_cpps(tmp_path, backend):
    """gpt-oss's attention sinks through ggml's fused attention (flash_attn_ext_add_sinks),
    sliding layers and experts: llama.cpp's logits with flash attention on (f16 cache)."""
    from runner.convert import convert
    from runner.loading.loader import load_model

    from tests.support.hf_tiny import checkpoint

    path = convert(checkpoint("gpt_oss", tmp_path / "hf"), tmp_path / "f32.gguf", "f32",
                   progress=False)
    model = load_model(path, backend)
    llm = reference(path, n_ctx=256, logits_all=True, flash_attn=True,
                    type_k=llama_cpp.GGML_TYPE_F16, type_v=llama_cpp.GGML_TYPE_F16)
    ids = model.tokenizer.encode("The capital of France is Paris.\n\nAnd  then \u2603 more.")
    ours, theirs = both_logits(llm, model, backend, ids, "f16", True)
    assert np.abs(ours - theirs).max() == 0.0


@pytest.mark.parametrize("kind", ["deepseek_v2", "deepseek_v3"])
def test_deepseeks_latent_cache_with_flash_attention_equals_llama_cpps(tmp_path, backend,
                                                                       kind):
    """Flash attention over an f16 cache of latent rows, the values read from the keys on
    both sides: bit for bit."""
    from runner.convert import convert
    from runner.loading.loader import load_model

    from tests.support.hf_tiny import checkpoint

    path = convert(checkpoint(kind, tmp_path / "hf"), tmp_path / "m.gguf", "f32",
                   progress=False)
    llm = reference(path, n_ctx=256, logits_all=True, flash_attn=True, type_k=1, type_v=1)
    model = load_model(path, backend)
    ids = model.tokenizer.encode("The capital of France is Paris.\n\nAnd  then \u2603 more.")
    ours, theirs = both_logits(llm, model, backend, ids, "f16", True)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("kind,config,cache_type", [
    ("gemma4", dict(head_dim=64, global_head_dim=128, hidden_size=128, num_attention_heads=2),
     "q8_0"),
    ("gemma3", dict(head_dim=64, hidden_size=128, num_attention_heads=2,
                    query_pre_attn_scalar=64), "q4_0")], ids=["gemma4", "gemma3"])
def test_converted_models_rotate_quantized_caches_as_llama_cpp(tmp_path, backend, kind,
                                                               config, cache_type):
    """Rotation sides per layer where head sizes differ (Gemma 4: 64 on sliding layers, 128
    on full ones, a shared KV) and on sliding-window caches: bit for bit."""
    from runner.convert import convert
    from runner.loading.loader import load_model

    from tests.support.hf_tiny import checkpoint

    path = convert(checkpoint(kind, tmp_path / "hf", **config), tmp_path / "m.gguf", "f32",
                   progress=False)
    ggml_type = {"q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0}[cache_type]
    llm = reference(path, n_ctx=256, logits_all=True, flash_attn=True, n_batch=512,
                    type_k=ggml_type, type_v=ggml_type)
    model = load_model(path, backend)
    ids = model.tokenizer.encode("The capital of France is Paris, and the capital of Spain "
                                 "is Madrid. " * 3)
    ours, theirs = both_logits(llm, model, backend, ids, cache_type, True)
    np.testing.assert_array_equal(ours, theirs)


def embeds_alike(path, texts, atol: float, context: int = 128, same_ids: bool = True,
                 **llama_cpp_options) -> None:
    """Our embedding of each text (from the GGUF at path) within atol of llama.cpp's,
    from the same token ids where same_ids."""
    import runner

    llm = reference(path, embedding=True, n_ctx=context, flash_attn=False,
                    **llama_cpp_options)
    model = runner.load(path, num_ctx=context, batch_size=context)
    try:
        for text in texts:
            if same_ids:
                assert model.tokenizer.encode(text, add_special=True) == \
                    llm.tokenize(text.encode(), add_bos=True, special=True)
            np.testing.assert_allclose(model.embed(text), llm.embed(text, normalize=False),
                                       rtol=0, atol=atol)
    finally:
        model.close()


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_converted_bert_embeds_in_llama_cpp_as_in_ours(tmp_path, pooling):
    """llama.cpp loads our BERT files (it needs tokenizer.ggml.token_type_count, which our
    converter first left out), tokenizes as we do, and embeds alike: llama.cpp's BERT takes
    the tanh GELU and keeps no cache (exact keys and values), as ours now does (an f16 cache
    and the erf GELU put us 7e-4 away); what remains is the order of a few sums (measured
    2e-7 to 2.4e-5)."""
    from runner.convert import convert

    from tests.support.hf_tiny import bert_checkpoint

    path = convert(bert_checkpoint(tmp_path / "hf", pooling), tmp_path / "bert.gguf", "f32",
                   progress=False)
    embeds_alike(path, ["The capital of France is Paris.", "Hello, world! How are you today?"],
                 1e-4)


def test_converted_nomic_bert_embeds_in_llama_cpp_as_in_ours(tmp_path):
    """A Nomic BERT file of ours (nomic-embed-text's architecture) in llama.cpp: the same
    token ids, the same mean-pooled vectors (no cache on either side)."""
    from runner.convert import convert

    from tests.support.hf_embedding import NOMIC_TEXTS, nomic_checkpoint

    path = convert(nomic_checkpoint(tmp_path / "hf"), tmp_path / "nomic.gguf", "f32",
                   progress=False)
    embeds_alike(path, NOMIC_TEXTS, 1e-5)


def test_converted_nomic_bert_moe_embeds_in_llama_cpp_as_in_ours(tmp_path):
    """nomic-embed-text-v2-moe's architecture (experts every second layer, XLM-RoBERTa's
    Unigram tokenizer) from our converter in llama.cpp: the same ids, the same vectors
    (measured 1.8e-5 apart: the experts' sums in another order)."""
    from runner.convert import convert

    from tests.support.hf_embedding import NOMIC_MOE_CONFIG, NOMIC_TEXTS, nomic_checkpoint

    path = convert(nomic_checkpoint(tmp_path / "hf", **NOMIC_MOE_CONFIG),
                   tmp_path / "moe.gguf", "f32", progress=False)
    embeds_alike(path, NOMIC_TEXTS + ["  spaces   and\ttabs ＡＢＣ ﬁ"], 5e-5)


def test_converted_embedding_gemma_embeds_in_llama_cpp_as_in_ours(tmp_path):
    """An EmbeddingGemma file of ours (its Dense layers included, as llama.cpp's converter
    writes them with --sentence-transformers-dense-modules) in llama.cpp: the same token
    ids, the same vectors (llama.cpp pools, then applies the Dense layers; we apply them to
    each row, then pool: the same linear map, summed in another order; measured 1.1e-5 on
    one machine, 5.1e-5 on an AVX-512 EPYC, whose kernels sum in wider steps)."""
    from runner.convert import convert

    from tests.support.hf_embedding import EMBEDDING_GEMMA_TEXTS, embedding_gemma_checkpoint

    path = convert(embedding_gemma_checkpoint(tmp_path / "hf"), tmp_path / "emb.gguf", "f32",
                   progress=False)
    embeds_alike(path, EMBEDDING_GEMMA_TEXTS, 1e-4, context=256, n_batch=256, n_ubatch=256,
                 type_k=0, type_v=0)


def test_converted_last_token_embedding_model_embeds_in_llama_cpp_as_in_ours(tmp_path):
    """A Qwen3-Embedding-shaped file (Qwen 3, last-token pooling) embeds in llama.cpp as in
    ours, both caching keys and values in f32 (llama.cpp's default f16 cache moves the
    vector by 9e-4)."""
    from runner.convert import convert

    from tests.support.hf_embedding import QWEN3_EMBEDDING_TEXTS, qwen3_embedding_checkpoint

    path = convert(qwen3_embedding_checkpoint(tmp_path / "hf"), tmp_path / "emb.gguf", "f32",
                   progress=False)
    embeds_alike(path, QWEN3_EMBEDDING_TEXTS, 1e-4, same_ids=False, type_k=0, type_v=0)


def llama_cpp_q4_k_m(source, target):
    """source quantized to Q4_K_M by llama.cpp's quantizer, at target."""
    import ctypes

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    assert llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(),
                                          ctypes.byref(params)) == 0
    return target


def assert_quantized_alike(source, directory) -> None:
    """Q4_K_M of source by our quantizer and by llama.cpp's: the same type for every tensor."""

    from pyggml.gguf_reader import Header
    from runner.convert.quantize import quantize_file

    ours = quantize_file(source, directory / "ours.gguf", "Q4_K_M", progress=False)
    theirs = llama_cpp_q4_k_m(source, directory / "theirs.gguf")

    def types(path):
        return {t.name: pyggml.dtypes.type_name(t.type).upper() for t in Header(path).tensors}

    ours, theirs = types(ours), types(theirs)
    assert {n: (t, theirs.get(n)) for n, t in ours.items() if t != theirs.get(n)} == {}
    assert ours == theirs


# wide enough for K-quants' 256-value blocks; 8 layers, so that layer-dependent rules show
QUANTIZED_SHAPE = dict(hidden_size=256, intermediate_size=512, head_dim=64,
                       num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=8)


@pytest.mark.parametrize("kind, config", [
    ("qwen3_moe", dict(moe_intermediate_size=256)),
    ("gemma2", dict(query_pre_attn_scalar=64)),
    ("olmo2", {}),
    ("ministral3", {}),
    ("gemma3n", dict(num_hidden_layers=22)),
    ("phi3", dict(rope_parameters=dict(PHI3_ROPE, long_factor=[1.0 + i for i in range(24)],
                                       short_factor=[1.0 + i / 24 for i in range(24)]))),
    ("glm4", {}),
    ("granite", {}), ("granitemoeshared", dict(shared_intermediate_size=256)),
    ("smollm3", {}), ("seed_oss", {}), ("mixtral", {}),
    ("cohere", {}), ("cohere2", {}), ("starcoder2", {}),
    # Gemma 4 12B's kind: tied (token_embd takes the output's type), K = V on full layers
    ("gemma4_unified", dict(global_head_dim=128, layer_types=["sliding_attention"] * 5 + [
        "full_attention", "sliding_attention", "full_attention"])),
    ("exaone4", dict(EXAONE4_SMALL, num_hidden_layers=8, layer_types=["full_attention"] * 8)),
    ("deepseek_v3", dict(kv_lora_rank=256, q_lora_rank=256,
                         qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                         moe_intermediate_size=256)),
])
def test_quantize_chooses_llama_cpps_type_for_every_tensor(tmp_path, kind, config):
    """Q4_K_M's mixture (a type per tensor, by name, layer and expert count) as llama.cpp's
    quantizer chooses it, for the architectures added since the mixture was written."""


    from runner.convert import convert

    from tests.support.hf_tiny import checkpoint

    f16 = convert(checkpoint(kind, tmp_path / "hf", **{**QUANTIZED_SHAPE, **config}),
                  tmp_path / "f16.gguf", "f16", progress=False)
    assert_quantized_alike(f16, tmp_path)


@pytest.mark.parametrize("experts", [4, 8])
def test_quantize_chooses_llama_cpps_type_for_nomic_bert_moe(tmp_path, experts):
    """Its fused attn_qkv takes attn_v's rules, as llama.cpp ranks it."""
    from runner.convert import convert

    from tests.support.hf_embedding import NOMIC_MOE_CONFIG, nomic_checkpoint

    wide = dict(NOMIC_MOE_CONFIG, n_embd=256, n_inner=512, n_head=4, n_layer=8, num_experts=experts)
    f16 = convert(nomic_checkpoint(tmp_path / "hf", **wide), tmp_path / "f16.gguf", "f16",
                  progress=False)
    assert_quantized_alike(f16, tmp_path)


@pytest.mark.parametrize("experts", [8, 16])
def test_ollamas_deepseek_layout_runs_and_quantizes_in_llama_cpp_as_in_ours(tmp_path,
                                                                             backend, experts):
    """A deepseek2 file as Ollama's converter writes it (kv_b whole, expanded heads): llama.cpp
    reads it too, through its attention without the latent form, and computes our logits
    to the bit; Q4_K_M picks llama.cpp's type for kv_b (attn_v's rules)."""


    from runner.convert import convert
    from runner.loading.loader import load_model

    from tests.support.hf_tiny import checkpoint
    from tests.support.gguf_edit import deepseek2_ollama_layout

    latent = convert(checkpoint("deepseek_v3", tmp_path / "hf"), tmp_path / "latent.gguf",
                     "f32", progress=False)
    path = deepseek2_ollama_layout(latent, tmp_path / "expanded.gguf")
    model = load_model(path, backend)
    llm = reference(path, n_ctx=256, logits_all=True, flash_attn=False, type_k=0, type_v=0)
    ids = model.tokenizer.encode("The capital of France is Paris.\n\nAnd  then \u2603 more.")
    ours, theirs = both_logits(llm, model, backend, ids, "f32", False)
    assert np.abs(ours - theirs).max() == 0.0

    wide = convert(checkpoint("deepseek_v3", tmp_path / "wide", **{
        **QUANTIZED_SHAPE, "kv_lora_rank": 256, "q_lora_rank": 256, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "moe_intermediate_size": 256,
        "n_routed_experts": experts}),
        tmp_path / "wide.gguf", "f32", progress=False)
    f32 = deepseek2_ollama_layout(wide, tmp_path / "wide_expanded.gguf")
    assert_quantized_alike(f32, tmp_path)


def test_a_qwen35_file_with_its_mtp_head_runs_in_llama_cpp_as_in_ours(tmp_path, backend):
    """Our converter keeps the MTP head as llama.cpp's does: llama.cpp loads the file (its
    qwen35 creates the head's tensors) and computes the model's logits as ours, bit for bit."""
    from runner.convert import convert
    from runner.loading.loader import load_model

    from tests.support.hf_tiny import checkpoint
    from tests.support.hf_released import with_mtp_head

    hf = checkpoint("qwen3_5", tmp_path / "hf", rms_norm_eps=1e-6)
    source, _ = with_mtp_head(hf, tmp_path / "mtp")
    path = convert(source, tmp_path / "mtp.gguf", "f32", progress=False)
    model = load_model(path, backend)
    llm = reference(path, n_ctx=256, logits_all=True, flash_attn=False, type_k=0, type_v=0)
    ids = model.tokenizer.encode("The capital of France is Paris.")
    ours, theirs = both_logits(llm, model, backend, ids, "f32", False)
    np.testing.assert_array_equal(ours, theirs)
