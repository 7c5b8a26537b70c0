"""The batch loop on SmolLM2 (flash attention): determinism, batching, prompt cache, stops,
shifts, cancellation and failures."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

PROMPTS = ["The capital of France is", "Once upon a time", "def fib(n):",
           "The sky is blue because"]
GREEDY = dict(temperature=0, num_predict=24)


def wait_free(engine, n, timeout=10):
    deadline = time.monotonic() + timeout
    while len(engine.cache.free()) < n:
        assert time.monotonic() < deadline, "slots were not freed"
        time.sleep(0.01)


@pytest.mark.parametrize("overlap", [True, False])
def test_parallel_streams_equal_each_alone(harness, overlap):
    alone = []
    for prompt in PROMPTS:
        engine = harness.engine(parallel=4, overlap=overlap, endless=True)
        alone.append(harness.run(engine, prompt, **GREEDY)[0])
        engine.stop()
    engine = harness.engine(parallel=4, overlap=overlap, endless=True)
    pending = [harness.submit(engine, p, **GREEDY)[1] for p in PROMPTS]
    together = [harness.collect(events) for events in pending]
    assert [t[0] for t in together] == alone
    assert all(t[1]["eval_count"] == 24 and t[1]["done_reason"] == "length" for t in together)


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("num_predict", [1, 2, 5])
def test_the_last_token_allowed_is_streamed_not_evaluated(harness, overlap, num_predict):
    """num_predict tokens cost the prompt's step and num_predict - 1 decode steps: no step
    evaluates a token after which none is wanted (a prompt's time to its only token, as
    llama-bench's pp measures it, is then its own step)."""
    engine = harness.engine(parallel=2, overlap=overlap)
    steps = []
    build = engine.executor.build
    engine.executor.build = lambda batch, *rest, **options: steps.append(len(batch)) or \
        build(batch, *rest, **options)
    prompt = harness.model.tokenize(PROMPTS[0], True)
    text, done, _ = harness.run(engine, prompt, temperature=0, num_predict=num_predict)
    assert done["eval_count"] == num_predict and done["done_reason"] == "length"
    assert steps == [len(prompt)] + [1] * (num_predict - 1)
    wait_free(engine, 2)
    kept = max(engine.cache.slots, key=lambda slot: len(slot.tokens)).tokens
    assert len(kept) == len(prompt) + num_predict - 1 and kept[:len(prompt)] == prompt


def test_seed_repeats_and_differs(harness):
    """From the same cache state. (A reused prefix evaluates the prompt's last token in a
    batch of one instead of with the whole prompt: ggml's kernels for the two sizes round
    differently, as in llama.cpp, so a sampled continuation may differ.)"""
    sampled = dict(temperature=1.0, top_k=100, num_predict=24)
    runs = []
    for seed in (7, 7, 8):
        runs.append(harness.run(harness.engine(parallel=2), PROMPTS[1], seed=seed,
                                **sampled)[0])
        harness.stop()
    first, again, other = runs
    assert first == again
    assert first != other


def test_prompt_chunks_share_batches_with_decodes(harness):
    engine = harness.engine(parallel=2, batch_size=16)
    seen = []
    build = engine.executor.build
    engine.executor.build = lambda batch, *rest, **options: seen.append(
        (batch.seqs.copy(), len(batch))) or build(batch, *rest, **options)
    try:
        _, first = harness.submit(engine, PROMPTS[0], temperature=0, num_predict=40)
        first.get(timeout=30)                              # decoding has begun
        long_prompt = " ".join(["word"] * 100)
        text, done, _ = harness.run(engine, long_prompt, temperature=0, num_predict=2)
        harness.collect(first)
    finally:
        engine.executor.build = build
    mixed = [seqs for seqs, n in seen if n == 16 and len(set(seqs.tolist())) == 2]
    assert mixed, "no batch held a prompt chunk of one sequence and a decode step of another"
    assert done["prompt_eval_count"] == len(harness.model.tokenize(long_prompt, True))


def test_prefix_reuse_counts_only_new_tokens(harness):
    engine = harness.engine(parallel=1)
    base = "A long shared system prompt about the weather in Paris. " * 3
    tokens = harness.model.tokenize(base + "Question one?", True)
    _, done, _ = harness.run(engine, tokens, temperature=0, num_predict=4)
    assert done["prompt_eval_count"] == len(tokens)
    second = harness.model.tokenize(base + "Question two, longer?", True)
    _, done, _ = harness.run(engine, second, temperature=0, num_predict=4)
    shared = next(i for i, (a, b) in enumerate(zip(tokens, second)) if a != b)
    assert done["prompt_eval_count"] == len(second)          # Ollama's count: the whole prompt
    assert done["prompt_cached_count"] == shared
    _, done, _ = harness.run(engine, second, temperature=0, num_predict=4)
    assert done["prompt_cached_count"] == len(second) - 1   # the last is evaluated for logits


def test_multiuser_cache_forks_the_best_prefix(harness):
    engine = harness.engine(parallel=2, multiuser=True)
    system = "You are a helpful assistant who answers briefly and kindly. " * 4
    first = harness.model.tokenize(system + "Hi!", True)
    harness.run(engine, first, temperature=0, num_predict=2)
    wait_free(engine, 2)
    second = harness.model.tokenize(system + "Hello there!", True)
    request, events = harness.submit(engine, second, temperature=0, num_predict=2)
    _, done, _ = harness.collect(events)
    shared = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    assert done["prompt_cached_count"] == shared
    wait_free(engine, 2)
    kv, (a, b) = engine.kv, engine.cache.slots
    both = kv.cells(a.id, 0, shared) & kv.cells(b.id, 0, shared)
    assert both.sum() == shared                        # the prefix's cells are shared


def test_stop_string_is_held_back_trimmed_and_leaves_the_cache(harness):
    engine = harness.engine(parallel=1)
    reference = harness.run(engine, PROMPTS[0], temperature=0, num_predict=24)[0]
    stop = "United States"
    assert stop in reference
    text, done, pieces = harness.run(engine, PROMPTS[0], temperature=0, num_predict=24,
                                     stop=[stop])
    assert text == reference[:reference.index(stop)]
    assert done["done_reason"] == "stop"
    assert all("United" not in p["content"] for p in pieces)
    wait_free(engine, 1)
    cached = harness.model.detokenize(engine.cache.slots[0].tokens)
    assert "United" not in cached and cached.endswith(text.rstrip()[-5:])


def test_full_context_shifts_or_ends_with_length(smollm2, harness):
    engine = harness.engine(parallel=4, endless=True)        # 512 cells: 128 per sequence
    prompt = harness.model.tokenize("Count: one, two, three, four,", True)
    text, done, _ = harness.run(engine, prompt, temperature=0, num_predict=300, num_keep=4)
    assert done["eval_count"] == 300 and done["done_reason"] == "length"
    assert len(engine.cache.slots[0].tokens) <= engine.context
    for limits in (dict(num_predict=300, shift=False), dict(num_predict=-2)):
        text, done, _ = harness.run(engine, prompt, temperature=0, **limits)
        assert done["done_reason"] == "length"
        assert done["eval_count"] == engine.context - len(prompt) + 1
    text, done, _ = harness.run(engine, prompt, temperature=0, num_predict=200, num_keep=-1)
    assert done["eval_count"] == 200
    wait_free(engine, 4)
    assert any(slot.tokens[:len(prompt)] == prompt and len(slot.tokens) > 60
               for slot in engine.cache.slots)           # the prompt survived every shift


def test_sequences_shift_in_the_same_batches_with_and_without_overlap(harness):
    """A sequence that fills its context while the next batch would be assembled beside the
    compute shifts first and stays in that batch, as one after the other: assembled early,
    it was left out and ran a step behind the others to the end."""
    batches = {}
    for overlap in (True, False):
        engine = harness.engine(parallel=4, overlap=overlap, endless=True)   # 128 cells each
        seen = batches[overlap] = []
        executor = engine.executor                    # the model's: watched for this engine
        build = executor.build
        executor.build = lambda batch, *rest, seen=seen, build=build, **options: \
            seen.append((batch.seqs.tolist(), batch.positions.tolist())) or \
            build(batch, *rest, **options)
        try:
            pending = [harness.submit(engine, prompt, temperature=0, num_predict=150,
                                      num_keep=4)[1] for prompt in PROMPTS[:2]]
            assert all(harness.collect(events)[1]["eval_count"] == 150 for events in pending)
        finally:
            engine.stop()
            del executor.build
    assert batches[True] == batches[False]
    shifted = [seqs for seqs, positions in batches[False] if len(seqs) == 2 and
               positions[0] < positions[-1] - 60]      # the first prompt's sequence shifted
    assert shifted and all(seqs == [0, 1] for seqs in shifted)


def test_prompt_longer_than_the_context_is_refused(harness):
    engine = harness.engine(parallel=4)
    with pytest.raises(ValueError, match="holds at most 128"):
        harness.submit(engine, list(range(1, 200)))
    with pytest.raises(ValueError, match="empty"):
        harness.submit(engine, [])


def test_cancel_frees_the_slot_and_others_go_on(harness):
    engine = harness.engine(parallel=2, endless=True)
    request, events = harness.submit(engine, PROMPTS[0], temperature=0, num_predict=-1)
    other = harness.submit(engine, PROMPTS[1], temperature=0, num_predict=30)[1]
    events.get(timeout=30)
    request.cancel()
    _, done, _ = harness.collect(events)
    assert done["done_reason"] == "closed"
    text, done, _ = harness.collect(other)
    assert done["eval_count"] == 30
    wait_free(engine, 2)


def test_requests_wait_for_a_slot(harness):
    engine = harness.engine(parallel=1)
    pending = [harness.submit(engine, p, temperature=0, num_predict=8)[1] for p in PROMPTS]
    results = [harness.collect(events) for events in pending]
    assert all(r[1]["eval_count"] == 8 for r in results)


def test_a_failed_batch_ends_its_sequences_and_the_loop_goes_on(harness):
    engine = harness.engine(parallel=2)
    launch = engine.executor.launch
    failures = [RuntimeError("injected fault")]

    def failing(step, *values):
        if failures:
            raise failures.pop()
        return launch(step, *values)

    engine.executor.launch = failing
    try:
        _, events = harness.submit(engine, PROMPTS[0], temperature=0, num_predict=8)
        event = events.get(timeout=30)
        assert "injected fault" in event["error"]
        text, done, _ = harness.run(engine, PROMPTS[0], temperature=0, num_predict=8)
    finally:
        engine.executor.launch = launch
    assert done["eval_count"] == 8
    wait_free(engine, 2)


def test_logprobs_of_greedy_tokens(harness):
    engine = harness.engine(parallel=1)
    _, done, pieces = harness.run(engine, PROMPTS[0], temperature=0, num_predict=6,
                                  logprobs=True, top_logprobs=3)
    entries = [e for p in pieces for e in p["logprobs"]]
    assert len(entries) == 6
    for entry in entries:
        top = [t["logprob"] for t in entry["top_logprobs"]]
        assert len(top) == 3 and top == sorted(top, reverse=True)
        assert entry["logprob"] == pytest.approx(top[0])      # greedy takes the best
        assert entry["token"] == entry["top_logprobs"][0]["token"]
        assert all(t <= 0 for t in top) and np.exp(top).sum() <= 1 + 1e-9


def test_timings_are_nanoseconds_and_include_the_prompt(harness):
    engine = harness.engine(parallel=1)
    _, done, _ = harness.run(engine, PROMPTS[0], temperature=0, num_predict=8)
    assert 1e5 < done["prompt_eval_duration"] < 3e10
    assert 1e5 < done["eval_duration"] < 3e10


def test_a_forked_sequence_that_fills_its_context_is_evaluated_again(harness):
    """Shifting would move cells another slot shares: the kept tokens are re-evaluated
    instead, and the other slot's cache stays whole."""
    engine = harness.engine(parallel=4, multiuser=True, endless=True)   # 128 per sequence
    system = "You are a helpful assistant who answers briefly and kindly. " * 8
    first = harness.model.tokenize(system + "Hi!", True)
    harness.run(engine, first, temperature=0, num_predict=2)
    wait_free(engine, 4)
    second = harness.model.tokenize(system + "Tell me a long story.", True)
    _, done, _ = harness.run(engine, second, temperature=0, num_predict=200)
    assert done["eval_count"] == 200
    wait_free(engine, 4)
    _, done, _ = harness.run(engine, first, temperature=0, num_predict=2)
    assert done["prompt_cached_count"] == len(first) - 1


def test_a_model_never_closed_stops_cleanly_when_python_exits(model_paths, tmp_path):
    """The loop is mid-generation when the script ends: it stops before the pool that runs
    its graphs refuses work, instead of failing a batch at shutdown."""
    script = tmp_path / "script.py"
    script.write_text(
        "import sys, threading, time\n"
        "import runner\n"
        "model = runner.load(sys.argv[1], num_ctx=256, threads=2)\n"
        "threading.Thread(target=lambda: list(model.generate('Once upon a time',\n"
        "                 num_predict=200)), daemon=True).start()\n"
        "time.sleep(0.5)\n")
    done = subprocess.run([sys.executable, str(script), str(model_paths["smollm2"])],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "A batch failed" not in done.stderr
