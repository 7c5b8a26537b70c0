"""Chained steps: with every layer on a device that queues graphs (here a real ggml RPC server
on loopback, as a GPU would be), or on the CPU, whose compute thread queues them, the batch
loop launches the next batch before it reads the greedy tokens of the last one, which the
device hands on itself. Everything a user sees must be what the CPU gives one step after
another: tokens, ends and what the prompt cache keeps."""

from __future__ import annotations

import queue
import time

import pytest

import runner
from pyggml.cpus import available_cpus
from runner.api import split_options
from runner.engine.request import Request

from tests.support.rpc_servers import rpc_server

CHAT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
REQUESTS = [   # two slots: the third waits, then joins a batch the other decodes in
    ("The capital of France is", dict(temperature=0, num_predict=40)),     # a stop: below
    (CHAT.format("What is 2+2?"), dict(temperature=0, num_predict=40)),      # ends on <|im_end|>
    ("Once upon a time", dict(temperature=0, num_predict=12)),
]


@pytest.fixture(scope="module")
def server():
    with rpc_server(threads=2) as running:
        yield running


def run(model, requests) -> list[tuple[str, str, int]]:
    """(text, done reason, tokens generated) of each request, all submitted at once."""
    events = queue.Queue()
    submitted = []
    for index, (prompt, options) in enumerate(requests):
        sampling, generation = split_options(dict(options))
        submitted.append(Request(model.tokenize(prompt, add_special=True),
                                 lambda event, index=index: events.put((index, event)),
                                 sampling, generation))
    model.engine.submit(*submitted)
    texts, ends = [""] * len(requests), [None] * len(requests)
    while None in ends:
        index, event = events.get(timeout=60)
        assert "error" not in event, event["error"]
        texts[index] += event.get("content", "")
        if event.get("done"):
            ends[index] = (event["done_reason"], event["eval_count"])
    return [(text, *end) for text, end in zip(texts, ends)]


def settle(model) -> list:
    """The slots, once the loop has finished every batch."""
    engine, deadline = model.engine, time.monotonic() + 30
    while engine.in_flight is not None or any(slot.busy for slot in engine.cache.slots):
        assert time.monotonic() < deadline, "the batch loop did not settle"
        time.sleep(0.01)
    return engine.cache.slots


def with_stop_inside(path, requests) -> list:
    """The requests, the first one's stop string a word from the middle of its own greedy
    text on this CPU in the same batches, so that it is found whatever the kernels round."""
    model = runner.load(path, num_ctx=128, parallel=2, repack=False, threads=1, num_gpu=0)
    try:
        words = run(model, requests)[0][0].split()
    finally:
        model.close()
    (prompt, options), *rest = requests
    return [(prompt, dict(options, stop=[words[len(words) // 2]]))] + rest


def test_chained_steps_give_what_the_cpu_gives(model_paths, server):
    """Chained on the CPU's compute thread and on a device that queues graphs, against the
    CPU one step after another (no overlap: nothing queued, nothing chained)."""
    found, requests = {}, with_stop_inside(model_paths["smollm2"], REQUESTS)
    places = {"cpu": dict(num_gpu=0, overlap=False), "cpu chained": dict(num_gpu=0),
              "rpc": dict(rpc=[server.endpoint], num_gpu=-1)}
    if available_cpus() < 2:            # the CPU chains where a CPU is left for the loop
        del places["cpu chained"]
    for where, devices in places.items():
        model = runner.load(model_paths["smollm2"], num_ctx=128, parallel=2, repack=False,
                            threads=1, **devices, flash_attn=False)
        chained = []
        build = model.executor.build

        def watched(batch, *args, seen=chained, build=build, **options):
            seen.append((len(batch), options.get("chained", False)))
            return build(batch, *args, **options)
        model.executor.build = watched
        try:
            assert model.executor.chains == (where != "cpu")
            found[where] = run(model, requests), [s.tokens for s in settle(model)], chained
        finally:
            model.close()
    cpu, cpu_slots, _ = found["cpu"]
    assert [end for _, end, _ in cpu] == ["stop", "stop", "length"]
    assert requests[0][1]["stop"][0] not in cpu[0][0] and cpu[1][0].strip()
    assert cpu[2][2] == 12
    for where in set(found) - {"cpu"}:
        texts, slots, chained = found[where]
        assert texts == cpu, where
        assert slots == cpu_slots, where      # the same tokens kept, the dropped ones not
        # every step after the prompts', the third prompt's with the first one's decode too
        assert [flag for _, flag in chained[1:]] == [True] * (len(chained) - 1), where
        assert any(n > 1 and flag for n, flag in chained[1:]) and len(chained) > 15, where


def test_the_cpu_overlaps_and_chains_only_with_a_cpu_left_beside_ggml(model_paths):
    """ggml's threads on every CPU: the loop's Python waits for each step (it would slow
    them at every barrier); with a CPU left over it works beside the compute and chains."""
    cpus = available_cpus()
    for threads in sorted({cpus, max(1, cpus - 1)}):
        model = runner.load(model_paths["smollm2"], num_ctx=64, threads=threads, num_gpu=0)
        try:
            spare = threads < cpus
            assert (model.engine.overlap, model.executor.chains) == (spare, spare), threads
        finally:
            model.close()


def test_a_sampled_sequence_beside_greedy_ones_unchains_their_steps(model_paths, server):
    """A sampler that needs more than the largest logit makes the batch read candidates;
    the next batch then takes its tokens from the host, and chaining resumes after."""
    mixed = [REQUESTS[2], ("Water boils at", dict(temperature=0.8, seed=3, num_predict=10))]
    texts = {}
    for where, devices in (("cpu", dict(num_gpu=0, overlap=False)),
                           ("cpu chained", dict(num_gpu=0)),
                           ("rpc", dict(rpc=[server.endpoint], num_gpu=-1))):
        model = runner.load(model_paths["smollm2"], num_ctx=128, parallel=2, repack=False,
                            threads=1, **devices)
        try:
            texts[where] = run(model, mixed)
        finally:
            model.close()
    assert texts["rpc"] == texts["cpu"] == texts["cpu chained"]
    assert [n for _, _, n in texts["cpu"]] == [12, 10]


def test_a_sequence_cancelled_mid_chain_leaves_and_the_other_goes_on(model_paths, server):
    """The kept sequence's text is its text alone. With flash attention, because without it
    a row's attention sums the zeros of the cells it does not see in SIMD lanes that depend
    on where its own cells lie, so that beside any neighbour (cancelled or not) a near-tie
    can fall the other way on another CPU's kernels (it did on AVX-512 and on ggml's AVX kernels):
    flash attention skips those cells, and a row's matrix products do not depend on the
    other rows, so the kept sequence computes the same bits in every batch."""
    model = runner.load(model_paths["smollm2"], num_ctx=128, parallel=2, repack=False,
                        threads=2, rpc=[server.endpoint], num_gpu=-1, flash_attn=True)
    try:
        prompt, options = REQUESTS[2][0], dict(temperature=0, num_predict=30)
        (alone, _, _), = run(model, [(prompt, options)])
        # the same pair with nothing cancelled: what the neighbour alone changes
        _, (beside, _, _) = run(model, [(REQUESTS[0][0], options), (prompt, options)])
        assert beside == alone
        events = {name: queue.Queue() for name in ("cancelled", "kept")}
        sampling, generation = split_options(options)
        requests = {name: Request(model.tokenize(prompt if name == "kept" else REQUESTS[0][0],
                                                 add_special=True),
                                  events[name].put, sampling, generation) for name in events}
        model.engine.submit(*requests.values())
        for _ in range(3):
            assert "content" in events["cancelled"].get(timeout=30)
        requests["cancelled"].cancel()
        kept = ""
        while not (event := events["kept"].get(timeout=30)).get("done"):
            kept += event["content"]
        assert kept == alone and event["eval_count"] == 30
        while not (event := events["cancelled"].get(timeout=30)).get("done"):
            pass
        assert event["done_reason"] == "closed" and event["eval_count"] < 30
        assert all(not slot.busy for slot in settle(model))
    finally:
        model.close()
