"""The Unigram tokenizer (t5) against the sentencepiece library on vocabularies trained here
with and without its NFKC normalization map; llama.cpp's ids are compared in
test_llamacpp_parity.py."""

from __future__ import annotations

import pytest

from runner.loading.loader import load_model
from runner.tokenizer.unigram import CharsMap

from tests.support.corpus import corpus
from tests.support.unigram import HARD, SETTINGS, USER_DEFINED, unigram_gguf


@pytest.fixture(scope="module", params=sorted(SETTINGS))
def trained(request, tmp_path_factory, backend):
    path, processor = unigram_gguf(tmp_path_factory.mktemp(request.param),
                                   *SETTINGS[request.param])
    return load_model(path, backend).tokenizer, processor, request.param


def segmentation_score(processor, ids) -> float:
    return sum(processor.get_score(i) for i in ids)


def test_ids_equal_sentencepiece(trained):
    """Where two segmentations score the same, sentencepiece and llama.cpp may pick
    different ones (llama.cpp keeps the first found; so do we): such ties must spell the
    same text with the same score. Text of spaces alone gets no leading space from
    llama.cpp (sentencepiece adds one). sentencepiece keeps a user-defined token inside the
    text it normalizes (a space piece before it); llama.cpp, and we, split it out first:
    texts with one are left to the llama.cpp comparison."""
    ours, processor, setting = trained
    texts = [t for t in corpus([]) + HARD if USER_DEFINED not in t]
    ties = 0
    for text in texts:
        mine, theirs = ours.encode(text, add_special=False), processor.encode(text)
        if text and not text.strip(" "):
            theirs = theirs[1:]
        if mine != theirs:
            ties += 1
            assert processor.decode_ids(mine) == processor.decode_ids(theirs), text
            assert segmentation_score(processor, mine) == \
                segmentation_score(processor, theirs), (text, mine, theirs)
    assert ties < len(texts) // 20, ties
    assert ours.vocab.charsmap if setting == "nfkc" else not ours.vocab.charsmap


def test_eos_is_added_and_special_tokens_split_out(trained):
    ours, processor, _ = trained
    assert ours.vocab.model == "t5" and not ours.vocab.add_bos and ours.vocab.add_eos
    assert ours.encode("hello")[-1] == 2
    user = processor.piece_to_id(USER_DEFINED)
    assert ours.encode(f"a{USER_DEFINED}b", add_special=False).count(user) == 1
    assert ours.encode(f"a{USER_DEFINED}b", add_special=False, parse_special=False).count(
        user) == 1                                     # user-defined: kept whole regardless
    assert 2 in ours.encode("x</s>", add_special=False)
    assert 2 not in ours.encode("x</s>", add_special=False, parse_special=False)


def test_unknown_characters_fold_into_one_unknown_token(trained):
    ours, _, _ = trained
    ids = ours.encode("ab 𐀀𐀁𐀂 cd", add_special=False)          # Linear B: not in the corpus
    assert ids.count(3) == 1


def test_decode_gives_the_normalized_text_back(trained):
    ours, _, setting = trained
    text = "Hello  world, it's   fine"
    decoded = ours.decode(ours.encode(text, add_special=False))
    expected = " Hello world, it's fine" if setting == "nfkc" else " " + text
    assert decoded == expected


@pytest.mark.parametrize("blob, message", [
    (b"\x01", "too short"), (b"\x10\0\0\0" + b"\0" * 8, "runs past its end")])
def test_a_broken_charsmap_is_refused(blob, message):
    with pytest.raises(ValueError, match=message):
        CharsMap(blob)
