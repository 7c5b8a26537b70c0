"""An engine over SmolLM2, fresh (empty cache, no kept graph) for each test."""

from __future__ import annotations

import queue

import pytest

import runner
from runner.api import split_options
from runner.engine.loop import Engine
from runner.engine.request import Request


@pytest.fixture(scope="module")
def smollm2(model_paths):
    # one thread: a CPU is left for the loop, so a step computes on the scheduler's compute
    # thread while an engine with overlap assembles the next (with ggml's threads on every
    # CPU, the model computes on the loop's thread, after it)
    model = runner.load(model_paths["smollm2"], num_ctx=128, parallel=4, threads=1,
                        flash_attn=True)
    yield model
    model.close()


class Endless:
    """The model's tokenizer, with no end-of-generation token."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)

    @staticmethod
    def is_eog(token: int) -> bool:
        return False


class Harness:
    """Starts engines over one model and collects the events of requests."""

    def __init__(self, model):
        self.model, self.engines = model, []

    def engine(self, endless: bool = False, **options) -> Engine:
        """endless: no token ends a generation (where a test is about lengths, a greedy text
        must not end sooner because another CPU's kernels round a near-tie the other way)."""
        for seq in range(64 - 1):
            self.model.kv.remove(seq)
        self.model.executor.forget()
        tokenizer = Endless(self.model.tokenizer) if endless else self.model.tokenizer
        engine = Engine(self.model.executor, tokenizer, **options)
        engine.start()
        self.engines.append(engine)
        return engine

    def submit(self, engine, prompt, **options) -> tuple[Request, queue.Queue]:
        events = queue.Queue()
        flags = {k: options.pop(k) for k in ("logprobs", "top_logprobs") if k in options}
        sampling, generation = split_options(options)
        tokens = prompt if isinstance(prompt, list) else \
            self.model.tokenize(prompt, add_special=True)
        request = Request(tokens, events.put, sampling, generation, **flags)
        engine.submit(request)
        return request, events

    @staticmethod
    def collect(events, timeout=60) -> tuple[str, dict, list]:
        """(text, final event, content events)."""
        pieces = []
        while True:
            event = events.get(timeout=timeout)
            if "content" in event:
                pieces.append(event)
            else:
                return "".join(p["content"] for p in pieces), event, pieces

    def run(self, engine, prompt, **options) -> tuple[str, dict, list]:
        return self.collect(self.submit(engine, prompt, **options)[1])

    def stop(self):
        for engine in self.engines:
            engine.stop()
        self.engines = []


@pytest.fixture
def harness(smollm2):
    h = Harness(smollm2)
    yield h
    h.stop()
