"""Every hyper-parameter a model reads is checked as it is read (keys.py's table, and the
configs' checks of how keys agree with each other and with the tensors): a malformed value
is a ModelError whose sentence names the GGUF key, raised when the model is opened, before
any memory or ggml op (which asserted and aborted the process, divided by zero, overflowed
or spun). A tiny llama's file, each value rewritten."""

from __future__ import annotations

import math

import numpy as np
import pytest

import pyggml
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.kvcache import CausalCache
from runner.loading.loader import load_model, open_model
from runner.models.base import ModelError
from runner.models.keys import INT32_MAX

from tests.support.gguf_edit import rewrite
from tests.support.tiny import SHAPE, llama_tensors, write_llama

HEAD = SHAPE["embd"] // SHAPE["heads"]          # 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_llama(tmp_path_factory.mktemp("tiny") / "tiny.gguf",
                       llama_tensors(np.random.default_rng(0)))


def anew(key: str, value) -> dict:
    """rewrite's arguments giving key a value of another type than the file's."""
    return dict(keys={key: None}, values={key: value})


MALFORMED = {
    # what ggml asserts (a SIGABRT of the whole process)
    "rope larger than the head": (dict(values={"llama.rope.dimension_count": 512}),
                                  rf"llama.rope.dimension_count is 512, larger than the head "
                                  rf"\({HEAD}\)"),
    "rope of odd dimensions": (dict(values={"llama.rope.dimension_count": 5}),
                               "llama.rope.dimension_count is 5, an odd number"),
    "negative epsilon": (dict(values={"llama.attention.layer_norm_rms_epsilon": -1.0}),
                         "llama.attention.layer_norm_rms_epsilon is -1.0, not a positive "
                         "finite number"),
    "NaN epsilon": (dict(values={"llama.attention.layer_norm_rms_epsilon": math.nan}),
                    "layer_norm_rms_epsilon is nan"),
    "zero epsilon": (dict(values={"llama.attention.layer_norm_rms_epsilon": 0.0}),
                     "layer_norm_rms_epsilon is 0.0"),
    "rope frequencies that are not rope.dimension_count / 2":
        (dict(tensors=lambda name, array, arrays: {
            name: array, **({"rope_freqs.weight": np.ones(3, np.float32)}
                            if name == "output.weight" else {})}),
         r"rope_freqs.weight has shape \(3,\).*\(4,\)"),
    "M-RoPE sections for a rope of one axis": (
        dict(values={"llama.rope.dimension_sections": [2, 1, 1, 0]}),
        r"llama.rope.dimension_sections is \[2, 1, 1, 0\], but Llama's rope turns positions "
        "of one axis"),
    "M-RoPE sections that give no axis a share": (
        dict(values={"llama.rope.dimension_sections": [0, 0, 0, 4]}),
        "llama.rope.dimension_sections is .*, which gives none of the axes"),
    # a core spinning for minutes
    "rope of no dimensions": (dict(values={"llama.rope.dimension_count": 0}),
                              "llama.rope.dimension_count is 0, not a positive whole number"),
    # garbage computed without a word
    "NaN rope base": (dict(values={"llama.rope.freq_base": math.nan}),
                      "llama.rope.freq_base is nan, not a positive finite number"),
    "infinite rope base": (dict(values={"llama.rope.freq_base": math.inf}),
                           "llama.rope.freq_base is inf"),
    "zero rope base": (dict(values={"llama.rope.freq_base": 0.0}),
                       "llama.rope.freq_base is 0.0"),
    "negative rope base": (dict(values={"llama.rope.freq_base": -5.0}),
                           "llama.rope.freq_base is -5.0"),
    # a ZeroDivisionError, or a tensor's shape named instead of the key
    "no heads": (dict(values={"llama.attention.head_count": 0}),
                 "llama.attention.head_count is 0, not a positive whole number"),
    "KV heads that do not divide the heads": (
        dict(values={"llama.attention.head_count_kv": 3}),
        r"llama.attention.head_count_kv is 3, which does not divide "
        r"llama.attention.head_count \(4\)"),
    "no KV heads": (dict(values={"llama.attention.head_count_kv": 0}),
                    "llama.attention.head_count_kv is 0, which does not divide"),
    "more heads than dimensions": (dict(values={"llama.attention.head_count": 64}),
                                   "llama.attention.head_count is 64, more than "
                                   r"llama.embedding_length \(32\)"),
    # a batch that failed on a tensor without memory, or a missing tensor named
    "no blocks": (dict(values={"llama.block_count": 0}),
                  "llama.block_count is 0, not a positive whole number"),
    "more blocks than the file holds": (dict(values={"llama.block_count": 9}),
                                        "llama.block_count is 9, more than the 2 blocks"),
    "a context of none": (dict(values={"llama.context_length": 0}),
                          "llama.context_length is 0, not a positive whole number"),
    # values of the wrong kind (an int() of them raised, or iterated)
    "a string for a count": (anew("llama.attention.head_count", "four"),
                             "llama.attention.head_count is 'four', not a positive whole"),
    "an array for a count": (anew("llama.embedding_length", [32, 32]),
                             r"llama.embedding_length is \[32, 32\], an array where one "
                             "number belongs"),
    "a fraction for a count": (anew("llama.feed_forward_length", 64.5),
                               "llama.feed_forward_length is 64.5, not a whole number"),
    # accepted: a token past the embedding table read past it
    "more tokens than embeddings": (
        dict(values={"tokenizer.ggml.tokens": [f"t{i}" for i in range(100)],
                     "llama.vocab_size": SHAPE["vocab"]}),
        r"tokenizer.ggml.tokens holds 100 tokens, more than the 64 rows of the embedding "
        r"table \(token_embd.weight\)"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_value_is_refused_naming_its_key(tiny, tmp_path, case):
    changes, message = MALFORMED[case]
    path = rewrite(tiny, tmp_path / "malformed.gguf", **changes)
    with pytest.raises(ModelError, match=message) as refused:
        open_model(path)
    assert str(refused.value).endswith(".")


def test_a_context_length_is_a_maximum_that_need_not_fit_an_int32(tiny, tmp_path, backend):
    """2^32 - 1 (it overflowed the rope's int32 on the first batch): taken as the largest
    context ggml's positions reach, and the model computes."""
    path = rewrite(tiny, tmp_path / "long.gguf", values={"llama.context_length": 2**32 - 1})
    model = load_model(path, backend)
    assert model.model.config.context == model.model.config.rope.original_context == INT32_MAX
    kv = CausalCache(model.model.cache_layers(), 16, backend, "f16", False)
    logits = Executor(model.model, kv, pyggml.Scheduler([backend])).logits(
        Batch.of_sequence([1, 2, 3], 0))
    assert np.isfinite(logits).all()


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    """A tiny Qwen 3 MoE's file (8 experts, 2 used)."""
    from runner.convert import convert

    from tests.support.hf_tiny import checkpoint

    work = tmp_path_factory.mktemp("moe")
    return convert(checkpoint("qwen3_moe", work / "hf"), work / "moe.gguf", "f32",
                   progress=False)


@pytest.mark.parametrize("used", [0, 9])
def test_experts_used_are_some_of_the_experts(moe, tmp_path, used):
    """More than there are made ggml's top_k assert (a SIGABRT); none, no FFN at all."""
    path = rewrite(moe, tmp_path / "moe.gguf", values={"qwen3moe.expert_used_count": used})
    with pytest.raises(ModelError, match=rf"qwen3moe.expert_used_count is {used}, not between "
                                         r"1 and qwen3moe.expert_count \(8\)"):
        open_model(path)
