"""config.json's sizes checked against the checkpoint's tensors before anything is built
from them: a tiny real checkpoint whose config lies is refused in a second with a sentence
naming the key (it made the converter allocate without end: 10**9 layers, 10**12 tokens)."""

from __future__ import annotations

import pytest

from runner.convert.checkpoint import CheckpointError, TensorEntry
from runner.convert.sizes import check_sizes, layers_held

from tests.support.hf_tiny import checkpoint
from tests.support.hostile_checkpoint import convert_in_child, rewritten


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Qwen 3: 2 layers, hidden size 64, 600 tokens."""
    return checkpoint("qwen3", tmp_path_factory.mktemp("sizes") / "hf")


LIES = [
    ({"num_hidden_layers": 10**9}, "config.json's num_hidden_layers is 1000000000, more "
                                   "than the 2 layers the checkpoint's tensors hold"),
    ({"vocab_size": 10**12}, "config.json's vocab_size is 1000000000000, more than the "
                             "largest dimension of the checkpoint's tensors, 600"),
    ({"num_experts": 10**9}, "config.json's num_experts is 1000000000"),
    ({"intermediate_size": 10**12}, "config.json's intermediate_size is 1000000000000"),
    ({"num_hidden_layers": "2"}, "config.json's num_hidden_layers is '2'; a whole number"),
    ({"num_hidden_layers": 2.5}, "config.json's num_hidden_layers is 2.5; a whole number"),
    ({"num_attention_heads": 0}, "config.json's num_attention_heads is 0; it must be at "
                                 "least 1"),
    ({"max_position_embeddings": 2**40}, "max_position_embeddings is 1099511627776, more "
                                         "than what GGUF records"),
    ({"rope_parameters": {"rope_theta": "x"}}, "config.json's rope_parameters.rope_theta is "
                                               "'x'; a finite number"),
    ({"rope_parameters": [1, 2]}, "config.json's rope_parameters is [1, 2]; an object"),
    ({"model_type": ["qwen3"]}, "config.json's model_type is ['qwen3']; a name"),
    ({"eos_token_id": [2, -1]}, "config.json's eos_token_id is -1; a whole number"),
    ({"hidden_size": None}, "config.json lacks hidden_size"),
]


@pytest.mark.parametrize("lie,words", LIES, ids=[str(lie) for lie, _ in LIES])
def test_a_config_that_lies_about_its_sizes_is_refused_before_anything_is_built(
        tiny, tmp_path, lie, words):
    status, last = convert_in_child(rewritten(tiny, tmp_path / "hf", config=lie))
    assert status == 1 and last.startswith("error: ") and words in last, last


def test_the_true_config_converts(tiny, tmp_path):
    assert convert_in_child(rewritten(tiny, tmp_path / "hf"))[0] == 0


def entries(*shapes: tuple[int, ...], names=None) -> dict:
    names = names or [f"model.layers.{i}.w" for i in range(len(shapes))]
    return {name: TensorEntry(name, shape, lambda: None) for name, shape in zip(names, shapes)}


def test_nested_sections_and_per_layer_lists_are_bounded_too():
    tensors = entries((64, 32), (64,))
    check_sizes({"text_config": {"hidden_size": 64, "intermediate_size": [32, 64]}}, tensors)
    with pytest.raises(CheckpointError, match=r"text_config\.intermediate_size is 65"):
        check_sizes({"text_config": {"intermediate_size": [32, 65]}}, tensors)
    with pytest.raises(CheckpointError, match="generation_config.json's eos_token_id"):
        check_sizes({"eos_token_id": "x"}, tensors, "generation_config.json")
    check_sizes({"head_dim": None, "rope_scaling": None, "sliding_window": None}, tensors)


def test_the_layers_held_are_the_highest_layer_index_plus_one():
    assert layers_held(entries((1,), (1,), names=["model.layers.0.a", "model.layers.11.b"])) \
        == 12
    assert layers_held(entries((1,), (1,), names=["encoder.layer.3.a", "embed.weight"])) == 4
    assert layers_held(entries((1,), (1,), (1,), names=["a", "b", "c"])) == 3
