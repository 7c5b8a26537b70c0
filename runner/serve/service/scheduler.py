"""Which runner serves a request: each loaded model runs in its own runner subprocess.

acquire() returns a lease on the model's runner, loading it first when it is not loaded
(or reloading it, once its requests finish, when the request asks for other load options).
At most max_queue requests wait or run at once, for a model loading or loaded (then Busy,
a 503). Loading evicts the least recently used idle model when max_loaded_models are loaded,
or when the new layout does not fit the free memory its runner measured. A released model
stays loaded for its keep_alive (0: unloaded when idle; infinite: never). A runner that
dies is noticed: its requests end with an error and the model is dropped, so the next
request starts a new one. A request whose client leaves while it waits is cancelled
(web/gone.py): it leaves the queue, and nothing is loaded or unloaded for it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field

from ..library.entry import Entry
from .options import LoadChoice, Settings
from .runners import OutOfMemory, Runner

log = logging.getLogger("runner.serve")


class Busy(RuntimeError):
    pass


@dataclass
class Loaded:
    entry: Entry
    choice: LoadChoice
    runner: Runner
    keep_alive: float
    parallel: int
    active: int = 0
    last_used: float = field(default_factory=time.monotonic)
    expires_at: float | None = None         # wall clock; None while in use
    _expiry: asyncio.Task | None = None

    @property
    def idle(self) -> bool:
        return self.active == 0

    def sizes(self) -> tuple[int, int]:
        """(total bytes, bytes on accelerators) from the runner's memory report."""
        memory = self.runner.memory or {}
        gpus = sum(_device_total(g) for g in memory.get("GPUs") or [])
        cpu = _device_total(memory.get("CPU") or {}) + memory.get("InputWeights", 0)
        return cpu + gpus, gpus


def _device_total(device: dict) -> int:
    return sum(device.get("Weights") or []) + sum(device.get("Cache") or []) + \
        device.get("Graph", 0)


class Scheduler:
    def __init__(self, settings: Settings, runner_class=Runner):
        """runner_class: what handles a model's runner (Runner's arguments and methods; the
        tests' fake runners)."""
        self.settings, self.runner_class = settings, runner_class
        self.loaded: dict[str, Loaded] = {}
        self._changed = asyncio.Condition()
        self._load_lock = asyncio.Lock()
        self.in_flight = 0           # requests waiting for a model or holding a lease
        self.stopping = False
        self._background: set[asyncio.Task] = set()

    async def acquire(self, entry: Entry, choice: LoadChoice, keep_alive: float | None
                      ) -> Loaded:
        if self.stopping:
            raise Busy("The server is shutting down.")
        if self.in_flight >= self.settings.max_queue:
            raise Busy("server busy, please try again.  maximum pending requests exceeded")
        self.in_flight += 1
        leased = False
        try:
            while True:
                async with self._changed:
                    current = self.loaded.get(entry.name)
                    if current is not None and not current.runner.alive:
                        self._forget(current)
                        current = None
                    if current is not None and current.choice == choice:
                        current.active += 1
                        self._keep(current, keep_alive)
                        leased = True
                        return current
                    if current is not None:                 # other options: reload when idle
                        if not current.idle:
                            await self._changed.wait()
                            continue
                        await self._unload(current)
                async with self._load_lock:
                    if entry.name in self.loaded:
                        continue                           # loaded meanwhile
                    loaded = await self._load(entry, choice, keep_alive)
                    loaded.active += 1
                    leased = True
                    return loaded
        finally:
            if not leased:
                self.in_flight -= 1

    def release(self, loaded: Loaded) -> None:
        """Return a lease. Not a coroutine, so that no cancellation (a client gone, a task
        cancelled in its finally) can stop it half-way and leak the lease."""
        loaded.active -= 1
        self.in_flight -= 1
        loaded.last_used = time.monotonic()
        if loaded.idle:
            self._expire_later(loaded)
        self._spawn(self._notify())

    def _spawn(self, work) -> asyncio.Task:
        """A background task, held until done (the loop holds tasks only weakly)."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _keep(self, loaded: Loaded, keep_alive: float | None) -> None:
        if keep_alive is not None:
            loaded.keep_alive = keep_alive
        if loaded._expiry is not None:
            loaded._expiry.cancel()
            loaded._expiry = None
        loaded.expires_at = None

    def _expire_later(self, loaded: Loaded) -> None:
        seconds = loaded.keep_alive
        loaded.expires_at = math.inf if math.isinf(seconds) else time.time() + seconds
        if math.isinf(seconds):
            return

        async def expire():
            await asyncio.sleep(seconds)
            async with self._changed:
                if loaded.idle and self.loaded.get(loaded.entry.name) is loaded:
                    await self._unload(loaded)

        loaded._expiry = asyncio.get_running_loop().create_task(expire())

    async def _load(self, entry: Entry, choice: LoadChoice, keep_alive: float | None) -> Loaded:
        parallel = 1 if "embedding" in entry.capabilities() else self.settings.num_parallel
        while len(self.loaded) >= self.settings.max_loaded_models:
            await self._evict_one()
        while True:
            runner = self.runner_class(entry.path, choice, self.settings, parallel,
                                       entry.projector)
            try:                  # a request cancelled meanwhile (its client left) stops it
                await runner.start()
                await runner.load()
                break
            except OutOfMemory:
                await runner.stop()
                if not await self._evict_one(wait=False):
                    raise
            except BaseException:
                await runner.stop()
                raise
        loaded = Loaded(entry, choice, runner,
                        self.settings.keep_alive if keep_alive is None else keep_alive, parallel)
        self.loaded[entry.name] = loaded
        self._spawn(self._on_exit(loaded))
        log.info("Loaded %s (%d slot(s), context %d).", entry.name, parallel, choice.num_ctx)
        return loaded

    async def _evict_one(self, wait: bool = True) -> bool:
        """Unload the least recently used idle model; wait for one to become idle (or, with
        wait False, give up) when none is."""
        async with self._changed:
            while True:
                idle = [m for m in self.loaded.values() if m.idle]
                if idle:
                    await self._unload(min(idle, key=lambda m: m.last_used))
                    return True
                if not wait or not self.loaded:
                    return False
                await self._changed.wait()

    async def _on_exit(self, loaded: Loaded) -> None:
        await loaded.runner.exited.wait()
        async with self._changed:
            if self.loaded.get(loaded.entry.name) is loaded:
                log.warning("The runner of %s is gone; the model is unloaded.", loaded.entry.name)
                self._forget(loaded)
            self._changed.notify_all()

    def _forget(self, loaded: Loaded) -> None:
        self.loaded.pop(loaded.entry.name, None)
        if loaded._expiry is not None and loaded._expiry is not asyncio.current_task():
            loaded._expiry.cancel()         # (the expiry itself must live to stop the runner)

    async def _unload(self, loaded: Loaded) -> None:
        self._forget(loaded)
        await loaded.runner.stop()
        log.info("Unloaded %s.", loaded.entry.name)
        self._changed.notify_all()

    async def unload(self, name: str) -> bool:
        """Unload a model now if idle, else as soon as its requests finish."""
        async with self._changed:
            loaded = self.loaded.get(name)
            if loaded is None:
                return False
            loaded.keep_alive = 0.0
            if loaded.idle:
                await self._unload(loaded)
            return True

    async def stop(self) -> None:
        """Stop every runner (their requests end with errors); load nothing more."""
        self.stopping = True
        loaded = list(self.loaded.values())
        for model in loaded:
            self._forget(model)
        await asyncio.gather(*(model.runner.stop() for model in loaded))
