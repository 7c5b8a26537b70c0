"""A runner without a process or ggml, for the scheduler's tests (as Ollama's sched_test.go
has mockLlm): it answers what runners.Runner answers, from a script the test sets, and
records what it was asked. FakeRunners(...) is the factory a Scheduler takes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from runner.serve.service.runners import ACCEPTED, OutOfMemory, RunnerError


@dataclass
class Script:
    """How the fake runners of one test behave: memory (bytes) each model needs, the bytes
    all loaded runners may hold together (beyond: OutOfMemory at load, as a runner's alloc
    reports), models whose load fails, and how long a completion takes (steps of the event
    loop, each one token)."""
    needs: dict[str, int] = field(default_factory=dict)
    budget: int | None = None
    failing: set[str] = field(default_factory=set)
    tokens: int = 3
    starting: asyncio.Event | None = None      # set: a runner's start waits for it
    started: list[str] = field(default_factory=list)       # model names, in order
    stopped: list[str] = field(default_factory=list)
    running: list["FakeRunner"] = field(default_factory=list)


class FakeRunner:
    def __init__(self, script: Script, path: Path, choice, settings, parallel: int,
                 projector: Path | None = None):
        self.script, self.path, self.choice, self.parallel = script, path, choice, parallel
        self.name = path.stem
        self.memory: dict | None = None
        self.exited = asyncio.Event()
        self.completions = 0

    @property
    def alive(self) -> bool:
        return self in self.script.running

    async def start(self) -> None:
        self.script.started.append(self.name)
        self.script.running.append(self)
        if self.script.starting is not None:
            await self.script.starting.wait()

    async def load(self) -> dict:
        if self.name in self.script.failing:
            raise RunnerError(f"The model {self.name} failed to load.", 500)
        need = self.script.needs.get(self.name, 1)
        held = sum(r.memory["CPU"]["Weights"][0] for r in self.script.running if r.memory)
        if self.script.budget is not None and held + need > self.script.budget:
            raise OutOfMemory(f"model requires more memory than is available: {need} bytes",
                              None)
        self.memory = {"CPU": {"Weights": [need], "Cache": [0], "Graph": 0}, "GPUs": []}
        return self.memory

    async def completion(self, body):
        self.completions += 1
        yield ACCEPTED
        for i in range(self.script.tokens):
            await asyncio.sleep(0)
            yield {"content": f"t{i} "}
        yield {"done": True, "done_reason": "stop", "prompt_eval_count": 1,
               "prompt_eval_duration": 1, "eval_count": self.script.tokens, "eval_duration": 1}

    async def tokenize(self, text: str, parse_special: bool = True) -> list[int]:
        return list(range(len(text.split())))

    async def stop(self) -> None:
        if self.alive:
            self.script.running.remove(self)
            self.script.stopped.append(self.name)
        self.exited.set()

    def die(self) -> None:
        """The process is gone (killed, crashed)."""
        if self.alive:
            self.script.running.remove(self)
        self.exited.set()


def fake_runners(script: Script):
    """The factory a Scheduler takes: runners that follow script."""
    return lambda *args, **kwargs: FakeRunner(script, *args, **kwargs)
