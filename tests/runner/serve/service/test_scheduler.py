"""The scheduler over real runner subprocesses: eviction, the queue limit, keep_alive,
reloads, a runner killed mid-stream, concurrency, and no runner outliving the server; then
its policy alone over fake runners (tests/support/fake_runner.py, as Ollama's sched_test.go
uses mockLlm): loads, evictions by count and by memory, failed loads, the queue, reloads for
other options, a runner that dies, keep_alive and shutdown, in the quick tier."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time

from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from runner.serve.service.options import LoadChoice, Settings
from runner.serve.service.runners import OutOfMemory, RunnerError
from runner.serve.service.scheduler import Busy, Scheduler
from tests.support.fake_runner import Script, fake_runners

from tests.support.server import SHORT, ServerProcess, eventually, generate, loaded


@pytest.fixture
def one_model(models_dir, workdir):
    server = ServerProcess(models_dir, workdir, RUNNER_MAX_LOADED_MODELS=1, RUNNER_MAX_QUEUE=1,
                           RUNNER_NUM_PARALLEL=1)
    yield server
    assert server.stop() == 0
    assert server.runner_pids() == []


def test_at_most_max_loaded_models_the_least_recent_evicted(one_model):
    assert generate(one_model).status_code == 200 and loaded(one_model) == ["smollm2:135m"]
    assert generate(one_model, "gemma3:270m-base").status_code == 200
    assert loaded(one_model) == ["gemma3:270m-base"]
    assert eventually(lambda: len(one_model.runner_pids()) == 1)


def test_a_full_queue_answers_503_and_the_others_finish(one_model):
    results = []

    def ask():                               # long enough to hold its place while the other
        with httpx.Client(base_url=one_model.url, timeout=300) as client:         # comes
            results.append(generate(one_model, "gemma3:270m-base", client=client,
                                    prompt="Count: 1, 2, 3,", raw=True,
                                    options={"num_predict": 400, "temperature": 0}))

    first = threading.Thread(target=ask)
    first.start()
    assert eventually(lambda: one_model.runner_pids() != [])   # loading or generating: its
    second = generate(one_model, "gemma3:270m-base")                # place in the queue is taken
    first.join()
    assert second.status_code == 503 and "maximum pending requests" in second.json()["error"]
    assert results[0].status_code == 200


def test_keep_alive_expires_and_0_unloads_when_idle(one_model):
    generate(one_model, keep_alive="1s")
    assert loaded(one_model) == ["smollm2:135m"]
    time.sleep(1.5)                                                # past its second
    assert eventually(lambda: loaded(one_model) == [] and one_model.runner_pids() == [])
    generate(one_model, keep_alive=-1)
    expires = one_model.client.get("/api/ps").json()["models"][0]["expires_at"]
    assert expires.startswith("2318")                                    # for ever
    generate(one_model, keep_alive=0)
    assert loaded(one_model) == []


def test_other_load_options_reload_the_model(one_model):
    generate(one_model)
    first = one_model.runner_pids()
    generate(one_model, options={**SHORT, "num_ctx": 512})
    assert eventually(lambda: len(one_model.runner_pids()) == 1)
    second = one_model.runner_pids()
    assert first != second
    assert one_model.client.get("/api/ps").json()["models"][0]["context_length"] == 512
    generate(one_model, options={**SHORT, "num_ctx": 512, "temperature": 0.1})
    assert one_model.runner_pids() == second                   # sampling options never reload


def counting(server, after_three_lines, num_predict: int = 30000) -> list[dict]:
    """The lines of a long streamed count; after_three_lines() runs once three have come."""
    body = {"model": "smollm2:135m", "prompt": "Count: 1, 2, 3,", "raw": True,
            "options": {"num_predict": num_predict, "temperature": 0}}
    lines = []
    with server.client.stream("POST", "/api/generate", json=body) as response:
        for line in response.iter_lines():
            lines.append(json.loads(line))
            if len(lines) == 3:
                after_three_lines()
    return lines


def test_a_runner_killed_mid_stream_ends_the_request_and_the_next_one_starts_fresh(one_model):
    lines = counting(one_model, lambda: os.kill(*one_model.runner_pids(), signal.SIGKILL),
                     num_predict=2000)
    assert "error" in lines[-1] and "runner" in lines[-1]["error"] and len(lines) < 500
    assert eventually(lambda: loaded(one_model) == [])
    again = generate(one_model)
    assert again.status_code == 200 and again.json()["done"]


def test_parallel_plus_one_streams_all_finish_and_a_gone_client_frees_its_place(models_dir,
                                                                               workdir):
    server = ServerProcess(models_dir, workdir, RUNNER_NUM_PARALLEL=2)
    try:
        done = []

        def chat():
            with httpx.Client(base_url=server.url, timeout=300) as client:
                with client.stream("POST", "/api/chat", json={
                        "model": "smollm2:135m", "options": {"temperature": 0, "num_predict": 8},
                        "messages": [{"role": "user", "content": "Tell me a story."}]}) as r:
                    lines = [json.loads(line) for line in r.iter_lines()]
                done.append(lines[-1])

        threads = [threading.Thread(target=chat) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(done) == 3 and all(d["done"] and d["eval_count"] == 8 for d in done)
        body = {"model": "smollm2:135m", "prompt": "Count:", "options": {"num_predict": 5000}}
        for _ in range(3):                    # each leaves after a line: its slot frees at once
            with server.client.stream("POST", "/api/generate", json=body) as response:
                next(response.iter_lines())
        assert generate(server).json()["done"]
    finally:
        assert server.stop() == 0
    assert server.runner_pids() == []


def test_sigint_stops_the_server_and_its_runners(models_dir, workdir):
    server = ServerProcess(models_dir, workdir)
    generate(server)
    assert len(server.runner_pids()) == 1
    runners = server.runner_pids()
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(60) == 0
    assert eventually(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in runners))


def test_sigterm_ends_every_reply_with_its_error_and_exits_promptly(models_dir, workdir):
    server = ServerProcess(models_dir, workdir, RUNNER_NUM_PARALLEL=1)
    body = {"model": "smollm2:135m", "prompt": "Count: 1, 2, 3,", "raw": True,
            "options": {"num_predict": 30000, "temperature": 0}}
    waiting = []

    def wait_behind():                       # the one slot is busy: it waits in the runner
        with httpx.Client(base_url=server.url, timeout=300) as client:
            try:
                waiting.append(client.post("/api/generate", json=dict(body, stream=False)))
            except httpx.ConnectError:       # (a machine so busy it never got there)
                waiting.append(None)

    thread, stopping = threading.Thread(target=wait_behind), []

    def terminate():
        thread.start()
        time.sleep(0.5)
        stopping.append(time.monotonic())
        server.proc.send_signal(signal.SIGTERM)

    lines = counting(server, terminate)
    assert server.proc.wait(60) == 0
    stopped = time.monotonic() - stopping[0]
    thread.join()
    assert "shutting down" in lines[-1]["error"] and len(lines) < 1000
    if waiting[0] is not None:
        assert waiting[0].status_code == 503 and "shutting down" in waiting[0].json()["error"]
    print(f"SIGTERM to exit with two requests in progress: {stopped:.1f} s")
    assert eventually(lambda: server.runner_pids() == [])


def test_a_runner_that_stops_answering_is_replaced(models_dir, workdir):
    server = ServerProcess(models_dir, workdir, RUNNER_NUM_PARALLEL=1, RUNNER_STALL_TIMEOUT=5)
    try:
        stopped = []

        def stop():
            stopped.extend(server.runner_pids())
            os.kill(*stopped, signal.SIGSTOP)

        lines = counting(server, stop)
        stopped = stopped[0]
        assert "stopped answering" in lines[-1]["error"]
        assert eventually(lambda: not os.path.exists(f"/proc/{stopped}"))
        again = generate(server)
        assert again.status_code == 200 and again.json()["done"]
        assert stopped not in server.runner_pids()
    finally:
        assert server.stop() == 0


# -- the scheduler's policy with fake runners (tests/support/fake_runner.py): no processes --

@dataclass
class FakeEntry:
    name: str

    @property
    def path(self) -> Path:
        return Path(f"/models/{self.name}.gguf")

    projector = None

    def capabilities(self) -> list[str]:
        return ["completion"]


CHOICE = LoadChoice(num_ctx=2048)


def scheduled(script: Script, **settings) -> Scheduler:
    return Scheduler(Settings(**settings), runner_class=fake_runners(script))


async def lease(scheduler: Scheduler, name: str, choice: LoadChoice = CHOICE,
                keep_alive: float | None = None):
    return await scheduler.acquire(FakeEntry(name), choice, keep_alive)


def test_a_loaded_model_is_leased_again_without_a_new_runner():
    async def scenario():
        script = Script()
        scheduler = scheduled(script)
        first = await lease(scheduler, "a")
        second = await lease(scheduler, "a")
        assert first is second and first.active == 2 and script.started == ["a"]
        scheduler.release(first)
        scheduler.release(second)
        assert scheduler.in_flight == 0
        await scheduler.stop()
        assert script.running == []

    asyncio.run(scenario())


def test_beyond_max_loaded_models_the_least_recently_used_idle_one_goes():
    async def scenario():
        script = Script()
        scheduler = scheduled(script, max_loaded_models=2)
        for name in ("a", "b", "a"):                     # a used last: b is the oldest
            scheduler.release(await lease(scheduler, name))
        scheduler.release(await lease(scheduler, "c"))
        assert script.stopped == ["b"] and sorted(scheduler.loaded) == ["a", "c"]
        await scheduler.stop()

    asyncio.run(scenario())


def test_a_load_that_does_not_fit_evicts_an_idle_model_and_tries_again():
    async def scenario():
        script = Script(needs={"a": 6, "b": 6}, budget=10)
        scheduler = scheduled(script)
        scheduler.release(await lease(scheduler, "a"))
        scheduler.release(await lease(scheduler, "b"))
        assert script.started == ["a", "b", "b"] and list(scheduler.loaded) == ["b"]
        assert script.stopped == ["b", "a"]         # the runner that did not fit, then a
        await scheduler.stop()

    asyncio.run(scenario())


def test_a_model_that_fits_nowhere_is_refused_and_frees_its_place_in_the_queue():
    async def scenario():
        script = Script(needs={"big": 11}, budget=10, failing={"broken"})
        scheduler = scheduled(script)
        with pytest.raises(OutOfMemory):
            await lease(scheduler, "big")
        with pytest.raises(RunnerError, match="failed to load"):
            await lease(scheduler, "broken")
        assert scheduler.loaded == {} and scheduler.in_flight == 0 and script.running == []

    asyncio.run(scenario())


def test_requests_cancelled_while_they_wait_load_nothing_and_stop_a_starting_runner():
    """What a request whose client left (web/gone.py cancels it) leaves behind: waiting for
    a busy model's place, nothing (the busy one stays); starting its own runner, that
    runner stopped."""
    async def scenario():
        script = Script()
        scheduler = scheduled(script, max_loaded_models=1)
        busy = await lease(scheduler, "a")
        waiters = [asyncio.ensure_future(lease(scheduler, "b")) for _ in range(6)]
        await asyncio.sleep(0.01)
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        scheduler.release(busy)
        await asyncio.sleep(0.01)
        assert list(scheduler.loaded) == ["a"] and script.started == ["a"]
        script.starting = asyncio.Event()
        await scheduler.unload("a")
        starting = asyncio.ensure_future(lease(scheduler, "b"))
        while "b" not in script.started:
            await asyncio.sleep(0)
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        assert script.stopped == ["a", "b"] and script.running == []
        assert scheduler.in_flight == 0 and scheduler.loaded == {}

    asyncio.run(scenario())


def test_requests_beyond_the_queue_are_refused_as_busy():
    async def scenario():
        scheduler = scheduled(Script(), max_queue=2)
        held = [await lease(scheduler, "a"), await lease(scheduler, "a")]
        with pytest.raises(Busy, match="maximum pending requests"):
            await lease(scheduler, "a")
        scheduler.release(held.pop())
        scheduler.release(await lease(scheduler, "a"))
        scheduler.release(held.pop())
        await scheduler.stop()

    asyncio.run(scenario())


def test_other_load_options_wait_for_the_leases_then_reload():
    async def scenario():
        script = Script()
        scheduler = scheduled(script)
        first = await lease(scheduler, "a")
        other = asyncio.ensure_future(lease(scheduler, "a", LoadChoice(num_ctx=4096)))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not other.done() and script.started == ["a"]     # waits: a is in use
        scheduler.release(first)
        reloaded = await other
        assert reloaded.choice.num_ctx == 4096 and script.started == ["a", "a"]
        assert script.stopped == ["a"]
        scheduler.release(reloaded)
        await scheduler.stop()

    asyncio.run(scenario())


def test_a_runner_that_dies_is_forgotten_and_the_next_request_starts_another():
    async def scenario():
        script = Script()
        scheduler = scheduled(script)
        loaded = await lease(scheduler, "a")
        scheduler.release(loaded)
        loaded.runner.die()
        for _ in range(5):
            await asyncio.sleep(0)
        assert scheduler.loaded == {}
        again = await lease(scheduler, "a")
        assert again.runner is not loaded.runner and script.started == ["a", "a"]
        scheduler.release(again)
        await scheduler.stop()

    asyncio.run(scenario())


def test_keep_alive_zero_unloads_once_idle_and_stop_unloads_everything():
    async def scenario():
        script = Script()
        scheduler = scheduled(script)
        scheduler.release(await lease(scheduler, "a", keep_alive=0.0))
        for _ in range(20):
            await asyncio.sleep(0)
            if not scheduler.loaded:
                break
        assert scheduler.loaded == {} and script.stopped == ["a"]
        await lease(scheduler, "b")
        await scheduler.stop()
        assert script.running == [] and scheduler.loaded == {}
        with pytest.raises(Busy, match="shutting down"):
            await lease(scheduler, "b")

    asyncio.run(scenario())
