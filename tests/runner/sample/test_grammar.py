"""Structured output: JSON, JSON Schemas and GBNF grammars enforced while sampling (llguidance),
on the real SmolLM2: what it returns parses and validates, every time."""

from __future__ import annotations

import json
import queue

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


def _chain(links: int) -> dict:
    """A schema whose $defs each refer to the next, links long (llguidance's compiler
    recurses once a link)."""
    defs = {f"d{i}": {"type": "array", "items": {"$ref": f"#/$defs/d{i + 1}"}}
            for i in range(links)}
    return {"$defs": {**defs, f"d{links}": {"type": "integer"}}, "$ref": "#/$defs/d0"}


def _nested(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


@pytest.mark.parametrize("format, grammar, message", [
    ({"enum": [f"value{i}" for i in range(20000)]}, "", "characters long; at most 131072"),
    (_nested(100), "", "nested 201 levels deep; at most 128"),
    (None, "\n".join([f'r{i} ::= "a" r{i + 1} | "b"' for i in range(1200)] +
                     ['r1200 ::= "z"', "root ::= r0"]), "1202 rules; at most 1000"),
    (None, "%llguidance {}\nstart: " + " | ".join(f'"w{i}"' for i in range(30000)),
     "characters long"),
])
def test_a_grammar_past_its_bounds_is_refused_with_a_sentence(model, format, grammar,
                                                              message):
    with pytest.raises(GrammarError, match=message) as refused:
        compile_grammar(model.tokenizer, model.loaded.model.config.vocab, format, grammar)
    assert "\n" not in str(refused.value) and str(refused.value).endswith(".")


def test_a_long_chain_of_refs_or_rules_compiles_without_crashing(model_paths, tmp_path):
    """llguidance's compiler recurses once per link of a chain of $refs or rules: 2,000
    links crashed the process (SIGSEGV, a thread's 8 MiB of stack) before grammars were
    compiled on a deep stack. In a child process, so that a crash fails only this test."""
    import subprocess
    import sys

    probe = (
        "import json, sys, runner\n"
        "from runner.sample.grammar import Constraint, compile_grammar\n"
        "model = runner.load(sys.argv[1], num_ctx=64, threads=1)\n"
        "vocab = model.loaded.model.config.vocab\n"
        "schema = json.loads(sys.stdin.read())\n"
        "lark = '%llguidance {}\\n' + '\\n'.join([f'r{i}: \"a\" r{i + 1} | \"b\"' "
        "for i in range(5000)] + ['r5000: \"z\"', 'start: r0'])\n"
        "for fmt, grammar in ((schema, ''), (None, lark)):\n"
        "    text = compile_grammar(model.tokenizer, vocab, fmt, grammar)\n"
        "    assert Constraint(model.tokenizer, vocab, text).allowed().any()\n"
        "print('compiled')\n")
    done = subprocess.run([sys.executable, "-c", probe, str(model_paths["smollm2"])],
                          input=json.dumps(_chain(2000)), capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-2000:]


def test_a_grammar_past_llguidances_limits_midway_ends_its_sequence_alone(model):
    """1,000 optional properties compile, but the parser's row after the object's opening
    passes llguidance's limit (2,000 items): that sequence ends with a one-line error (and
    status 400), the one batched beside it goes on."""
    from runner.engine.request import Request

    many = {"type": "object", "properties": {
        f"p{i}": {"anyOf": [{"type": "string"}, {"type": "number"}]} for i in range(1000)}}
    constraint = model.constraint(many)
    prompt = model.tokenize("A JSON object:", add_special=True)
    options = runner.api.split_options({"num_predict": 8, "temperature": 0})
    ended: queue.Queue = queue.Queue()

    def ends(key):
        return lambda event: ("done" in event or "error" in event) and ended.put((key, event))

    model.engine.submit(*(Request(prompt, ends(key), *options, constraint=held)
                          for key, held in (("bad", constraint), ("plain", None))))
    events = dict(ended.get(timeout=120) for _ in range(2))
    assert events["bad"].get("status") == 400 and "grammar" in events["bad"]["error"], events
    assert "\n" not in events["bad"]["error"] and "<grammar>" not in events["bad"]["error"]
    assert events["plain"].get("done"), events["plain"]
