"""What the runner process holds: one model file, and once loaded the model and its engine.

Life cycle (the protocol's /load operations): launched -> fit (a memory report of the real
placement, nothing allocated) -> alloc (the layout is checked against each device's free
memory and kept) -> commit (weights mapped or copied to their devices, KV cache and compute
memory allocated, the batch loop started; /health shows progress) -> close (everything freed,
back to launched). Started with --model alone, the runner commits a default layout at once.
A layout that does not fit answers Success false with its sizes; a device lost later (an RPC
server gone) turns health to error until the model is loaded again.
"""

from __future__ import annotations

import enum
import logging
import threading
from dataclasses import dataclass, field, replace

import pyggml

from .. import defaults
from ..api import LoadOptions, Model, footprint_of
from ..engine.loop import Engine
from ..kvcache.causal import check_cache_type
from ..loading import store
from ..loading.devices import DeviceOptions
from ..loading.fit import Footprint
from ..loading.loader import Loaded, open_model
from .memory import memory_report, shortfalls

log = logging.getLogger("runner.process")


class Status(enum.IntEnum):
    READY = 0
    NO_SLOT = 1
    LAUNCHED = 2
    LOADING = 3
    NOT_RESPONDING = 4
    ERROR = 5


@dataclass(frozen=True)
class Layout:
    """How to load: the protocol's /load fields and the command line's flags."""
    parallel: int = defaults.PARALLEL
    batch_size: int = defaults.BATCH
    ctx_size: int = defaults.CONTEXT  # KV cache cells in all; one sequence holds ctx_size/parallel
    threads: int | None = None
    flash_attn: str = "auto"        # auto (defaults.flash_attention) | on | off
    kv_cache_type: str = defaults.KV_CACHE_TYPE
    multiuser_cache: bool = False
    overlap: bool = True            # build the next batch's graph while one computes
    swa_full: bool = False          # sliding-window layers keep the whole context
    checkpoints: int | None = None  # recurrent states kept per sequence (None: by size)
    devices: DeviceOptions = field(default_factory=DeviceOptions)

    def check(self) -> None:
        if self.flash_attn not in ("auto", "on", "off"):
            raise ValueError(f"flash attention must be auto, on or off, not {self.flash_attn!r}.")
        if not 1 <= self.parallel <= 63:
            raise ValueError(f"parallel must lie in [1, 63], not {self.parallel}.")
        if self.ctx_size < self.parallel:
            raise ValueError(f"A context of {self.ctx_size} cannot be shared by {self.parallel} "
                             "sequences.")
        if self.batch_size < 1:
            raise ValueError(f"The batch size must be positive, not {self.batch_size}.")
        check_cache_type(self.kv_cache_type, self.flash)
        self.load_options()

    @property
    def flash(self) -> bool:
        return defaults.flash_attention(self.flash_attn, self.kv_cache_type)

    def load_options(self) -> LoadOptions:
        return LoadOptions(num_ctx=self.ctx_size // self.parallel, parallel=self.parallel,
                           batch_size=self.batch_size, threads=self.threads,
                           flash_attn=self.flash, kv_cache_type=self.kv_cache_type,
                           multiuser_cache=self.multiuser_cache, overlap=self.overlap,
                           swa_full=self.swa_full, checkpoints=self.checkpoints,
                           devices=self.devices)


class OutOfMemory(Exception):
    """A layout that does not fit: the protocol answers Success false with its sizes."""

    def __init__(self, message: str, memory: dict):
        super().__init__(message)
        self.memory = memory


class RunnerState:
    def __init__(self, model: str, pull: bool = False, projector=None):
        self.path = store.resolve(model, pull_missing=pull)
        self.projector = projector
        self.header = pyggml.GGUFFile(self.path)          # metadata only until commit
        self.status, self.progress = Status.LAUNCHED, 0.0
        self.error: str | None = None
        self.layout: Layout | None = None
        self.shift_default = True           # for requests that do not say (--no-shift)
        self.model: Model | None = None
        self.engine: Engine | None = None
        self._opened: Loaded | None = None
        self._lock = threading.Lock()

    @property
    def opened(self) -> Loaded:
        """The model bound to its tensors (no memory until commit), opened once."""
        if self._opened is None:
            try:
                self._opened = open_model(self.path, projector=self.projector)
            except Exception as error:               # a corrupt file: health reports it
                self._failed(error)
                raise
        return self._opened

    def measure(self, layout: Layout) -> Footprint:
        """What layout takes on each device, measured without allocating."""
        layout.check()
        return footprint_of(self.opened, layout.load_options())

    def fit(self, layout: Layout) -> dict:
        if self.model is not None and layout == self.layout:
            return memory_report(self.model.footprint())
        return memory_report(self.measure(layout))

    def check_fit(self, layout: Layout) -> Footprint:
        """The layout's footprint, or OutOfMemory when a device's free memory cannot hold it."""
        footprint = self.measure(layout)
        problems = shortfalls(footprint)
        if problems:
            raise OutOfMemory(f"The layout does not fit: {'; '.join(problems)}"
                              f"{self._checkpoints_share(layout)}.", memory_report(footprint))
        return footprint

    def _checkpoints_share(self, layout: Layout) -> str:
        """Where a layout asked for checkpoints of recurrent states: what they take."""
        if not layout.checkpoints:
            return ""
        per_state = sum(s.state.nbytes for s in self.opened.model.cache_layers()
                        if s.state is not None)
        if not per_state:
            return ""
        share = per_state * layout.checkpoints * layout.parallel
        return (f"; of that, {layout.checkpoints} checkpoints of the recurrent states per "
                f"sequence take {share / 2**20:.0f} MiB (ask for fewer checkpoints)")

    def alloc(self, layout: Layout) -> dict:
        footprint = self.check_fit(layout)
        with self._lock:
            if self.model is not None:
                raise ValueError("A model is loaded; close it before allocating another layout.")
            self.layout = layout
        return memory_report(footprint)

    def commit(self, layout: Layout | None = None) -> dict:
        """Load with the allocated layout (or layout); blocks until done."""
        with self._lock:
            if self.model is not None:
                raise ValueError("The model is already loaded; close it first.")
            layout = layout or self.layout or Layout()
        try:
            self.check_fit(layout)
        except OutOfMemory:
            raise                                    # another layout may fit
        except Exception as error:
            self._failed(error)
            raise
        with self._lock:
            self.layout, self.status, self.progress, self.error = \
                layout, Status.LOADING, 0.0, None
        try:
            model = Model(self.opened, layout.load_options(), self._advance)
        except (pyggml.GGMLError, MemoryError) as error:
            if "out of memory" not in str(error) and not isinstance(error, MemoryError):
                self._failed(error)
                raise
            self.status, self.progress = Status.LAUNCHED, 0.0     # another layout may fit
            raise OutOfMemory(str(error), memory_report(self.measure(layout))) from error
        except Exception as error:
            self._failed(error)
            raise
        self.model, self.engine = model, model.engine
        self.status, self.progress = Status.READY, 1.0
        return memory_report(model.footprint())

    def _failed(self, error: Exception) -> None:
        self.status, self.error = Status.ERROR, f"The model failed to load: {error}"
        log.exception("Loading failed.")

    def _advance(self, done: int, total: int) -> None:
        self.progress = done / total if total else 1.0

    def close(self) -> None:
        with self._lock:
            engine, model = self.engine, self.model
            self.engine = self.model = None
            self.status, self.error = Status.LAUNCHED, None
        if engine is not None:
            engine.drain()
        if model is not None:
            model.close("The model was closed.")
        self.progress = 0.0

    def health(self) -> tuple[Status, float]:
        model, engine = self.model, self.engine
        if self.status == Status.READY and model is not None:
            failure = model.failure()
            if failure:
                self.status, self.error = Status.ERROR, f"The model cannot compute: {failure}."
            elif engine is not None and engine.busy:      # None: closed meanwhile
                return Status.NO_SLOT, self.progress
        return self.status, self.progress

    def with_defaults(self, **changes) -> Layout:
        return replace(self.layout or Layout(), **changes)
