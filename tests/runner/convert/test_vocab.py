"""The tokenizer's files as the converter reads them when they are malformed: an id past the
vocabulary (which made the token list a list of 10**12), an id that is not a number, a
tokenizer.json that is not one; each refused with a sentence naming the file."""

from __future__ import annotations

import json

import pytest

from tests.support.hf_tiny import checkpoint
from tests.support.hostile_checkpoint import convert_in_child, rewritten


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return checkpoint("qwen3", tmp_path_factory.mktemp("vocab") / "hf")


def with_added_token(tiny, token_id) -> str:
    spec = json.loads((tiny / "tokenizer.json").read_text())
    spec["added_tokens"].append({"id": token_id, "content": "<|lie|>", "special": True})
    return json.dumps(spec)


@pytest.mark.parametrize("token_id,words", [
    (10**12, "gives the token '<|lie|>' the id 1000000000000, not one of the 601 ids"),
    (-5, "the id -5, not one of"),
    ("5", "the id '5', not one of"),
])
def test_an_added_token_s_id_is_one_of_the_vocabulary_s(tiny, tmp_path, token_id, words):
    lying = rewritten(tiny, tmp_path / "hf",
                      files={"tokenizer.json": with_added_token(tiny, token_id)})
    status, last = convert_in_child(lying)
    assert status == 1 and words in last, last


@pytest.mark.parametrize("text,words", [
    ("nope", "error: tokenizer.json is not JSON"),
    ('{"added_tokens": []}', "error: A tokenizer file (tokenizer.json, tokenizer_config.json, "
                             "vocab.txt) lacks the key 'model'."),
    ('{"model": "x"}', "holds a value of the wrong kind or size (TypeError"),
])
def test_a_malformed_tokenizer_json_is_named(tiny, tmp_path, text, words):
    status, last = convert_in_child(rewritten(tiny, tmp_path / "hf",
                                              files={"tokenizer.json": text}))
    assert status == 1 and words in last, last
