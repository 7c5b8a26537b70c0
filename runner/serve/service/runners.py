"""One runner subprocess (`python -m runner --model ... --port 0 --no-load`) and its
protocol, from the server's side: start it, load a layout (fit, alloc, commit), stream
completions, embed, tokenize, and notice when it dies or stops answering."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import sys
import time
from pathlib import Path

import httpx

from ... import protocol
from ...protocol import CompletionRequest, LoadRequest
from .options import LoadChoice, Settings

log = logging.getLogger("runner.serve")
LOAD_TIMEOUT = 600.0
ACCEPTED: dict = {}      # completion()'s first event: the runner took the request


class RunnerError(RuntimeError):
    """The runner failed, refused, or is gone; the message says which."""

    def __init__(self, message: str, status: int = 500):
        super().__init__(message)
        self.status = status


class OutOfMemory(RunnerError):
    def __init__(self, message: str, memory: dict | None):
        super().__init__(message, 500)
        self.memory = memory


class Runner:
    def __init__(self, path: Path, choice: LoadChoice, settings: Settings, parallel: int,
                 projector: Path | None = None):
        self.path, self.choice, self.settings, self.parallel = path, choice, settings, parallel
        self.projector = projector
        self.process: asyncio.subprocess.Process | None = None
        self.client: httpx.AsyncClient | None = None
        self.memory: dict | None = None
        self.exited = asyncio.Event()
        self.working = 0                     # calls waiting for an answer
        self.answered_at = time.monotonic()  # when it last answered anything
        self.stalled = False

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        choice = self.choice
        flags = ["--model", str(self.path), "--port", "0", "--no-load", "--no-pull",
                 "--parallel", str(self.parallel),
                 "--ctx-size", str(choice.num_ctx * self.parallel),
                 "--batch-size", str(choice.num_batch), "--flash-attn",
                 self.settings.flash_attention, "--kv-cache-type", self.settings.kv_cache_type,
                 "--num-gpu", str(choice.num_gpu), *self.settings.runner_flags]
        if choice.main_gpu is not None:
            flags += ["--main-gpu", str(choice.main_gpu)]
        if self.projector is not None:
            flags += ["--mmproj", str(self.projector)]
        if choice.num_thread:
            flags += ["--threads", str(choice.num_thread)]
        secret = secrets.token_urlsafe(32)      # in the environment: never on a command line
        self.process = process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "runner", *flags, cwd="/", stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL, preexec_fn=_die_with_parent,
            env={**os.environ, "RUNNER_SECRET": secret})
        loop = asyncio.get_running_loop()
        self._watchers = [loop.create_task(self._watch()), loop.create_task(self._watch_stalls())]
        try:
            assert process.stdout is not None                     # piped above
            line = (await asyncio.wait_for(process.stdout.readline(), 120)).decode()
        except asyncio.TimeoutError:
            line = ""
        if "listening on" not in line:
            await self.stop()
            raise RunnerError(f"The runner for {self.path.name} did not start (exit code "
                              f"{process.returncode}).")
        self.client = httpx.AsyncClient(base_url="http://" + line.split()[-1],
                                        headers={"Authorization": f"Bearer {secret}"},
                                        timeout=httpx.Timeout(LOAD_TIMEOUT, connect=10))

    def _process(self) -> asyncio.subprocess.Process:
        """The process, once start() made it."""
        if self.process is None:
            raise RunnerError("The runner was not started.")
        return self.process

    def _client(self) -> httpx.AsyncClient:
        """The client of a runner that started (it printed its address)."""
        if self.client is None:
            raise RunnerError("The runner has not started answering yet.")
        return self.client

    async def _watch(self) -> None:
        process = self._process()
        await process.wait()
        self.exited.set()
        if process.returncode not in (0, -15):
            log.warning("The runner for %s exited with code %s.", self.path.name,
                        process.returncode)

    async def _watch_stalls(self) -> None:
        """The watchdog: a runner with work that has answered nothing for stall_timeout, and
        does not answer /health within it either (stopped, deadlocked), is killed; its
        requests end with an error and the next one starts a new runner."""
        stall = self.settings.stall_timeout
        while self.alive:
            await asyncio.sleep(min(1.0, stall / 4))
            if not self.working or time.monotonic() - self.answered_at < stall or \
                    self.client is None:
                continue
            try:
                await self.client.get("/health", timeout=stall)
                self.answered_at = time.monotonic()
            except httpx.HTTPError:
                if self.alive:
                    log.warning("The runner for %s answered nothing for %.0f s with work "
                                "pending; it is replaced.", self.path.name, stall)
                    self.stalled = True
                    self._process().kill()
                return

    @contextlib.asynccontextmanager
    async def _call(self):
        """A call the watchdog waits on: it counts as work until it ends."""
        self.working += 1
        self.answered_at = time.monotonic()
        try:
            yield
        finally:
            self.working -= 1
            self.answered_at = time.monotonic()

    async def load(self) -> dict:
        """fit, then alloc (OutOfMemory when a device cannot hold it), then commit."""
        layout = LoadRequest(operation=0, parallel=self.parallel,
                             batch_size=self.choice.num_batch,
                             kv_size=self.choice.num_ctx * self.parallel,
                             flash_attention=self.settings.flash_attention,
                             kv_cache_type=self.settings.kv_cache_type,
                             multiuser_cache=self.settings.multiuser_cache,
                             num_threads=self.choice.num_thread)
        fit = await self._post("/load", layout)
        alloc = await self._post("/load", layout.model_copy(update={"operation": 1}))
        if not alloc.get("Success"):
            raise OutOfMemory(f"model requires more memory than is available: "
                              f"{alloc.get('error', '')}", alloc.get("Memory") or fit["Memory"])
        commit = await self._post("/load", layout.model_copy(update={"operation": 2}))
        if not commit.get("Success"):
            raise OutOfMemory(commit.get("error", "loading failed"), commit.get("Memory"))
        self.memory = commit["Memory"]
        return self.memory

    async def _post(self, path: str, body: protocol.Body) -> dict:
        try:
            async with self._call():
                response = await self._client().post(path, json=body.wire())
        except httpx.HTTPError as error:
            raise self._gone(error) from None
        if response.status_code != 200:
            raise RunnerError(_message(response), response.status_code)
        return response.json()

    def _gone(self, error: Exception) -> RunnerError:
        code = self.process.returncode if self.process else None
        if self.stalled:
            return RunnerError(f"The model's runner stopped answering for "
                               f"{self.settings.stall_timeout:.0f} s and was stopped; the next "
                               "request starts a new one.")
        if code is not None:
            return RunnerError(f"The model's runner stopped (exit code {code}); the next request "
                               "starts a new one.")
        return RunnerError(f"The model's runner did not answer: {error}.")

    async def completion(self, body: CompletionRequest):
        """The runner's NDJSON events of one completion, after ACCEPTED: the runner took the
        request (its refusals raise before that, as soon as it answers; the first event comes
        once the prompt is read)."""
        try:
            async with self._call(), self._client().stream(
                    "POST", "/completion", json=body.wire(),
                    timeout=httpx.Timeout(None, connect=10)) as response:
                if response.status_code != 200:
                    await response.aread()
                    raise RunnerError(_message(response), response.status_code)
                yield ACCEPTED
                async for line in response.aiter_lines():
                    self.answered_at = time.monotonic()
                    if line:
                        yield json.loads(line)
        except httpx.HTTPError as error:
            raise self._gone(error) from None

    async def embedding(self, text: str | list[int]) -> dict:
        """text, or token ids to embed as they are."""
        return await self._post("/embedding", protocol.EmbeddingRequest(tokens=text)
                                if isinstance(text, list) else
                                protocol.EmbeddingRequest(content=text))

    async def tokenize(self, text: str, parse_special: bool = True) -> list[int]:
        return (await self._post("/tokenize", protocol.TokenizeRequest(
            content=text, parse_special=parse_special)))["tokens"]

    async def detokenize(self, tokens: list[int]) -> str:
        return (await self._post("/detokenize", protocol.DetokenizeRequest(
            tokens=tokens)))["content"]

    async def stop(self) -> None:
        """End the process: SIGTERM, then SIGKILL if it lingers."""
        if self.client is not None:
            await self.client.aclose()
        if self.alive:
            process = self._process()
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 15)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()


def _message(response: httpx.Response) -> str:
    try:
        return response.json().get("error") or response.text
    except ValueError:
        return response.text or f"status {response.status_code}"


def _die_with_parent() -> None:
    """In the child before exec: Linux ends it when the server dies, even by SIGKILL, so no
    runner outlives its server."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
