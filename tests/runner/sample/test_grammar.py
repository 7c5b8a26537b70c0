"""Structured output: JSON, JSON Schemas and GBNF grammars enforced while sampling (llguidance),
on the real SmolLM2: what it returns parses and validates, every time."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

import runner
from runner.sample.grammar import Constraint, GrammarError, compile_grammar, schema_of

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "city"],
          "properties": {"name": {"type": "string", "maxLength": 20},
                         "age": {"type": "integer", "minimum": 0, "maximum": 150},
                         "city": {"type": "string", "maxLength": 30}}}


@pytest.fixture(scope="module")
def model(model_paths):
    handle = runner.load(model_paths["smollm2"], num_ctx=512, threads=2)
    yield handle
    handle.close()


def test_a_schema_is_followed_every_time(model):
    prompt = model.apply_template([{"role": "user", "content": "Describe a person as JSON."}])
    for seed in range(6):
        text = model.generate(prompt, stream=False, format=PERSON, temperature=1.0, seed=seed,
                              num_predict=120)
        jsonschema.validate(json.loads(text), PERSON)
        assert model.last.done_reason == "stop"


def test_format_json_gives_an_object_and_a_grammar_its_language(model):
    prompt = model.apply_template([{"role": "user",
                                    "content": "What is the capital of France? Reply in JSON."}])
    text = model.generate(prompt, stream=False, format="json", temperature=0, num_predict=200)
    assert isinstance(json.loads(text), dict) and model.last.done_reason == "stop"
    answer = model.generate("Is the sky blue? Answer:", stream=False, temperature=0.9, seed=3,
                            grammar='root ::= " yes" | " no"')
    # the grammar's end stops the sequence (whichever tokens spelt the answer)
    assert answer in (" yes", " no") and model.last.done_reason == "stop"
    assert model.last.eval_count <= len(answer)


def test_the_mask_allows_what_the_grammar_allows(model):
    vocab = model.loaded.model.config.vocab
    constraint = model.constraint(grammar='root ::= "yes" | "no"')
    allowed = constraint.allowed()
    assert allowed.shape == (vocab,) and 0 < allowed.sum() < 50
    pieces = {model.tokenizer.piece(int(t)) for t in np.flatnonzero(allowed)}
    assert all(b"yes".startswith(p) or b"no".startswith(p) for p in pieces), pieces
    token = model.tokenize("yes")[0]
    assert allowed[token] and constraint.accept(token) is False     # complete after it
    logits = constraint.apply(np.zeros(vocab, np.float32))
    assert np.isneginf(logits[~allowed]).all() and (logits[allowed] == 0).all()


@pytest.mark.parametrize("format, grammar, message", [
    ({"type": "nonsense"}, "", "cannot be enforced"),
    ("yaml", "", 'is "json" or a JSON Schema'),
    (["a"], "", 'is "json" or a JSON Schema'),
    (None, 'root ::= "yes" | "no', "not valid GBNF"),
    (None, "root ::= undefined_rule", "Rule 'undefined_rule' not found"),
    ("json", 'root ::= "x"', "not both"),
])
def test_bad_formats_and_grammars_are_refused_with_a_sentence(model, format, grammar, message):
    with pytest.raises(GrammarError, match=message):
        compile_grammar(model.tokenizer, model.loaded.model.config.vocab, format, grammar)


def test_no_format_means_no_constraint(model):
    for nothing in (None, "", "null"):
        assert schema_of(nothing) is None and model.constraint(nothing) is None
    assert schema_of('{"type": "string"}') == {"type": "string"}
    assert isinstance(model.constraint("json"), Constraint)


def test_a_schema_that_lists_properties_allows_no_others(model):
    """As llama.cpp's schema grammars (and Ollama's) read a schema: an object that lists its
    properties takes no other key unless additionalProperties says so; sampled freely, the
    replies hold the declared keys only (nested objects too), while an open schema may
    hold others."""
    schema = {"type": "object", "required": ["name"],
              "properties": {"name": {"type": "string", "maxLength": 12},
                             "home": {"type": "object", "properties": {
                                 "city": {"type": "string", "maxLength": 12}}}}}
    assert schema_of(schema)["additionalProperties"] is False
    assert schema_of(schema)["properties"]["home"]["additionalProperties"] is False
    assert schema_of(dict(schema, additionalProperties=True))["additionalProperties"] is True
    assert "additionalProperties" not in schema_of("json")
    prompt = model.apply_template([{"role": "user", "content": "A person with many details, "
                                                               "as JSON."}])
    for seed in range(4):
        reply = json.loads(model.generate(prompt, stream=False, format=schema, seed=seed,
                                          temperature=1.0, num_predict=120))
        assert set(reply) <= {"name", "home"} and set(reply.get("home", {})) <= {"city"}


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    """A tiny Qwen 3 whose <think> and </think> are tokens, as the released ones'."""
    from runner.convert import convert

    from tests.support.hf_tiny import checkpoint

    directory = tmp_path_factory.mktemp("thinker")
    path = convert(checkpoint("qwen3_think", directory / "hf"), directory / "t.gguf", "f32",
                   progress=False)
    handle = runner.load(path, num_ctx=256, threads=2)
    yield handle
    handle.close()


def test_the_schema_holds_the_answer_after_the_thinking(thinker):
    """With think tags the grammar leaves the thinking free and holds what follows it; the
    same constraint without them forbids the close tag and holds the reply from its start."""
    from runner.sample.grammar import AfterThinking

    schema = {"type": "object", "required": ["a"], "additionalProperties": False,
              "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}}}
    tokens = thinker.tokenizer
    open_id, close_id = (tokens.encode(t, add_special=False) for t in ("<think>", "</think>"))
    assert len(open_id) == len(close_id) == 1
    after = thinker.constraint(schema, think_tags=("<think>", "</think>"))
    assert isinstance(after, AfterThinking)
    logits = np.zeros(thinker.loaded.model.config.vocab, dtype=np.float32)
    first = np.isfinite(after.apply(logits))
    assert first[open_id[0]] and not first[close_id[0]]       # the answer, or the thinking
    assert after.accept(open_id[0])
    free = tokens.encode("plan it", add_special=False)
    for token in free:
        assert np.isfinite(after.apply(logits)).all()            # thinking is free
        assert after.accept(token)
    assert after.accept(close_id[0])
    answer = np.isfinite(after.apply(logits))
    assert 0 < answer.sum() < answer.size and not answer[close_id[0]]
    # the prompt opened thinking and the model closes it at once: then a valid answer
    biased = dict(temperature=0, num_predict=100, logit_bias={str(close_id[0]): 100})
    opened = thinker.constraint(schema, think_tags=("<think>", "</think>"), think_opened=True)
    prompt = thinker.tokenize("Answer:", add_special=True)
    text = "".join(thinker._pieces(prompt, *runner.api.split_options(biased), opened))
    assert text.startswith("</think>")
    jsonschema.validate(json.loads(text[len("</think>"):]), schema)
    plain = "".join(thinker._pieces(prompt, *runner.api.split_options(biased),
                                    thinker.constraint(schema)))
    assert "</think>" not in plain
    jsonschema.validate(json.loads(plain), schema)
