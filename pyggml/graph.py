"""Graphs and the scheduler that computes them over several backends.

Build a graph in a Context, let a Scheduler allocate it (inputs and intermediate tensors get
compute memory on the backend that runs them), fill the inputs, compute. compute_async runs
the compute on the scheduler's compute thread (C: it starts at once, whatever Python does
meanwhile; worker.py), so Python can build the next graph meanwhile; wait() collects the
result. A scheduler made with inline=True starts the compute on the calling thread instead:
for devices that compute asynchronously (GPUs) the call returns once the work is queued,
sparing two thread hand-offs per step; the CPU's share of the graph then runs in the call.
Such a scheduler may queue the graph it allocated last again before the compute in flight is
done: the device runs the two in order.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

import numpy as np

from ._lib import ffi, lib
from .backend import Backend, cpu_backend
from .errors import GGMLError, failure_text
from .memory import Buffer
from .tensor import Tensor
from .worker import ComputeThread, Job

if TYPE_CHECKING:
    from .context import Context

INPUT_FLAG = 1          # GGML_TENSOR_FLAG_INPUT
MAX_SRC = lib.pyggml_max_src()       # operands a node may have

STATUS_TEXT = {
    lib.GGML_STATUS_ALLOC_FAILED: "a buffer could not be allocated",
    lib.GGML_STATUS_FAILED: "the backend failed",
    lib.GGML_STATUS_ABORTED: "the compute was aborted (or the one it was queued behind failed)",
}


class Graph:
    """The operations needed to compute outputs, in a Context with room for size nodes."""

    def __init__(self, ctx: Context, outputs, size: int):
        self.context = ctx
        raw = lib.safe_ggml_new_graph_custom(ctx.ptr, size, False)
        if not raw:
            raise GGMLError(failure_text("creating a graph", f"{size} nodes; create the context "
                                         "with graphs=N to make room for N graphs"))
        self._ptr = raw              # lives in the context's memory
        self.outputs = list(outputs)
        self._operands = None        # every node's operands as built (see pristine())
        for tensor in self.outputs:
            self.expand(tensor)

    def pristine(self) -> None:
        """Put back the operands the graph was built with, before a scheduler splits it:
        splitting it over several backends points nodes at copies in the scheduler's own
        memory, which the next split frees (kept at the first call, put back at the others;
        nodes expanded since are kept as they are)."""
        n = self.n_nodes
        if self._operands is not None:
            kept = len(self._operands) // MAX_SRC
            lib.pyggml_graph_operands(self.ptr, min(n, kept), self._operands, 1)
            if kept == n:
                return
        self._operands = ffi.new("struct ggml_tensor *[]", n * MAX_SRC)
        lib.pyggml_graph_operands(self.ptr, n, self._operands, 0)

    @property
    def ptr(self):
        self.context.ptr  # noqa: B018 (raises once closed)
        return self._ptr

    def expand(self, tensor) -> None:
        """Add tensor and everything it depends on."""
        if not lib.safe_ggml_build_forward_expand(self.ptr, tensor.ptr):
            raise GGMLError(failure_text("adding to the graph", f"{self.n_nodes} of "
                                         f"{lib.ggml_graph_size(self._ptr)} nodes used"))

    @property
    def n_nodes(self) -> int:
        return lib.ggml_graph_n_nodes(self.ptr)

    def nodes(self):
        for i in range(self.n_nodes):
            raw = lib.ggml_graph_node(self._ptr, i)
            yield Tensor(raw, self.context, max(1, lib.ggml_n_dims(raw)))


class Computation:
    """A compute in flight; wait() returns when it is done and raises if it failed. job:
    the worker's (its result is the status), or None when the compute was queued inline
    with status (then wait() synchronizes the scheduler)."""

    def __init__(self, job: Job | None, scheduler: "Scheduler", status: int = 0,
                 kept: dict | None = None):
        self._job, self._status = job, status
        self._scheduler = scheduler
        self._kept = kept or {}          # tensor pointer -> the array its values end in
        self._synchronized = job is not None
        self._finished = False          # waited for and checked: another wait() returns
        self.waited = False             # wait() was called (its outcome read or raised)

    def done(self) -> bool:
        return self._job.done() if self._job is not None else self._synchronized

    def kept(self, tensor) -> np.ndarray:
        """The values tensor had as this compute ended (compute_async's keep), after wait():
        a compute queued behind it may have overwritten the tensor itself since."""
        if not self.waited:
            raise GGMLError("Wait for the compute before reading what it kept.")
        try:
            return self._kept[tensor.ptr]
        except KeyError:
            raise GGMLError(f"The compute did not keep {tensor.name or 'that tensor'}; name it "
                            "in compute_async's keep.") from None

    def raise_if_not_queued(self) -> None:
        """Raise if queuing this (inline) compute failed, without waiting for it."""
        if self._job is None and self._status != lib.GGML_STATUS_SUCCESS:
            self.wait()

    def wait(self) -> None:
        self.waited = True
        if self._finished:
            return
        if self._job is not None:
            status = self._job.result()
        else:
            if not self._synchronized:
                lib.ggml_backend_sched_synchronize(self._scheduler.ptr)
                self._synchronized = True
            status = self._status
        if status != lib.GGML_STATUS_SUCCESS:
            reason = self._scheduler.failure() or STATUS_TEXT.get(status, f"status {status}")
            raise GGMLError(f"Computing the graph failed: {reason}.")
        self._scheduler.check()
        self._finished = True


class Scheduler:
    """ggml_backend_sched over backends (the CPU is appended when missing; it must be last)."""

    def __init__(self, backends: list[Backend] | None = None, graph_size: int = 8192,
                 parallel: bool = False, inline: bool = False):
        backends = list(backends or [])
        if not backends or not backends[-1].is_cpu:
            backends = [b for b in backends if not b.is_cpu] + [cpu_backend()]
        self.backends = backends
        array = ffi.new("struct ggml_backend *[]", [b.ptr for b in backends])
        raw = lib.ggml_backend_sched_new(array, ffi.NULL, len(backends), graph_size, parallel,
                                         True)
        if raw == ffi.NULL:
            raise GGMLError("Could not create a backend scheduler.")
        self._ptr = ffi.gc(raw, lib.ggml_backend_sched_free)
        self.graph_size, self.inline = graph_size, inline
        self._worker: ComputeThread | None = None      # started by the first compute_async
        self._in_flight: Computation | None = None
        self._allocated: weakref.WeakSet[Context] = weakref.WeakSet()
        self._current: tuple | None = None       # (graph, its node count) allocated last
        self._index_inputs: dict = {}          # of the graph allocated last
        self._inputs_on_host = False           # all of its inputs in host memory
        self._lock = threading.Lock()

    @property
    def ptr(self):
        if self._ptr is None:
            raise GGMLError("This scheduler was closed.")
        return self._ptr

    def place(self, tensor, backend: Backend) -> None:
        """Run tensor's operation on backend (otherwise the scheduler decides), in every
        graph of tensor's context this scheduler allocates."""
        tensor.context.place(tensor, backend)

    def _apply_placements(self, graph: Graph) -> None:
        # ggml_backend_sched_reset forgets them: given again before each split of the graph
        for ptr, backend in graph.context.placements.items():
            lib.ggml_backend_sched_set_tensor_backend(self.ptr, ptr, self._own(backend).ptr)

    def _own(self, backend: Backend) -> Backend:
        """This scheduler's backend for backend's device (ggml aborts on another one)."""
        mine = next((b for b in self.backends if b.device.name == backend.device.name), None)
        if mine is None:
            raise GGMLError(f"An operation is placed on {backend.name}, which this scheduler "
                            f"does not run (it runs {', '.join(b.name for b in self.backends)}).")
        return mine

    def backend_of(self, tensor) -> Backend | None:
        """The backend that computes tensor in the graph allocated last (None: not in it)."""
        raw = lib.ggml_backend_sched_get_tensor_backend(self.ptr, tensor.ptr)
        return next((b for b in self.backends if b.ptr == raw), None)

    def reserve(self, graph: Graph) -> None:
        """Size the compute buffers for graph (the largest graph you will run) up front."""
        self.wait()
        self._current = None
        graph.pristine()
        self._apply_placements(graph)
        if not lib.ggml_backend_sched_reserve(self.ptr, graph.ptr):
            failure = self.failure()
            raise GGMLError("Could not reserve compute memory for the graph (out of memory"
                            f"{'; ' + failure if failure else ''}).")

    def reserve_size(self, graph: Graph) -> dict[Backend, int]:
        """The compute memory graph needs on each backend, measured without allocating (its
        weights and caches may sit in dummy buffers: see BufferType.dummy)."""
        self.wait()
        self._current = None
        graph.pristine()
        self._apply_placements(graph)
        sizes = ffi.new("size_t[]", len(self.backends))
        lib.ggml_backend_sched_reserve_size(self.ptr, graph.ptr, sizes)
        return {backend: sizes[i] for i, backend in enumerate(self.backends)}

    def failure(self) -> str | None:
        """Why one of the backends can no longer compute (an RPC server went away), or None."""
        return next((f for f in (b.failure() for b in self.backends) if f), None)

    def check(self) -> None:
        """Raise if a backend failed since: a read of its memory gave zeros, not data. Call
        it after reading outputs that live on another machine."""
        failure = self.failure()
        if failure:
            raise GGMLError(f"Computing the graph failed: {failure}.")

    def alloc(self, graph: Graph) -> None:
        """Give graph's tensors compute memory; fill the inputs after this, before compute.
        Allocating again the graph allocated last (unchanged since) keeps its memory, as
        llama.cpp does when it reuses a graph; queued inline with its inputs in host memory,
        it does not even wait for that graph's compute in flight: ggml copies a compute's
        inputs before it returns, and the devices run the next compute after it. A graph
        allocated before another is allocated anew (split again from its own operands), so
        several graphs can be kept and taken in turn."""
        self._check_size(graph)
        shape = (graph, graph.n_nodes)
        if self._current != shape or not self._queues_behind:
            self.wait()
        if self._current != shape:
            self._current = None
            if graph.context in self._allocated:
                # its tensors still point into compute memory that another graph's allocation
                # may have freed since; ggml would take them for pre-allocated
                _detach_compute_memory(graph.context)
            graph.pristine()
            lib.ggml_backend_sched_reset(self.ptr)
            self._apply_placements(graph)
            if not lib.ggml_backend_sched_alloc_graph(self.ptr, graph.ptr):
                failure = self.failure()
                raise GGMLError("Could not allocate compute memory for the graph (out of "
                                f"memory{'; ' + failure if failure else ''}).")
            self._current = shape
            ctx = graph.context
            self._index_inputs = {ptr: what for ptr, (_, what) in ctx.index_limits.items()
                                  if ptr.buffer != ffi.NULL and ptr.flags & INPUT_FLAG}
            # unplaced, ggml keeps inputs on the CPU (its last backend)
            self._inputs_on_host = all(backend.is_cpu for ptr, backend in ctx.placements.items()
                                       if ptr.flags & INPUT_FLAG)
        if graph.context not in self._allocated:
            self._allocated.add(graph.context)
            graph.context.keepalive.append(self)
        # index inputs hold whatever the compute memory holds (the last compute may have
        # reused it): they must be set before the compute, or ggml's kernels may abort on an
        # out-of-range index
        graph.context.unfilled = dict(self._index_inputs)
        # queued behind a compute of this memory on the compute thread: inputs wait in host
        # memory until that compute ends
        busy = self._in_flight is not None and not self._in_flight.done()
        graph.context.staged = [] if busy and not self.inline else None

    @property
    def _queues_behind(self) -> bool:
        """A compute of the graph allocated last may be queued behind the one in flight: on
        the compute thread (its inputs staged until it starts), or inline where its inputs
        are in host memory."""
        return not self.inline or self._inputs_on_host

    def compute_async(self, graph: Graph, keep=()) -> Computation:
        """Start computing an allocated graph on the compute thread (inline: queue it from
        this thread). Allocated again while a compute of it is in flight, it waits behind
        that one. keep: outputs whose values the Computation holds once done (kept()), for
        outputs read after a compute queued behind this one started (compute thread only)."""
        self._check_size(graph)
        unfilled = graph.context.unfilled
        if unfilled:
            raise GGMLError(f"The graph's input holding {next(iter(unfilled.values()))} was not "
                            "set since the graph was allocated; its memory holds garbage that "
                            "would crash ggml. Set every input after alloc().")
        with self._lock:
            previous = self._in_flight
            if previous is not None and not previous.waited:
                # whether it is still running or just ended: its outputs and its failure,
                # if any, are read in wait(), and the next compute reuses its memory
                if not self._queues_behind:
                    raise GGMLError("A compute on this scheduler is in flight or was not "
                                    "waited for; wait() first.")
                previous.raise_if_not_queued()      # queued behind it: its failure first
            sched, cgraph = self.ptr, graph.ptr
            if self.inline:
                if keep:
                    raise GGMLError("An inline scheduler keeps no outputs; read them after "
                                    "wait(), before queuing another compute.")
                status = lib.ggml_backend_sched_graph_compute_async(sched, cgraph)
                self._in_flight = Computation(None, self, status)
            else:
                if self._worker is None:
                    self._worker = ComputeThread()
                staged, graph.context.staged = graph.context.staged or (), None
                kept = {t.ptr: t.host_array() for t in keep}
                try:
                    job = self._worker.submit(sched, cgraph, staged,
                                              [(t, kept[t.ptr]) for t in keep])
                except RuntimeError as refused:          # a third compute behind two
                    raise GGMLError(f"{refused} Wait for the oldest first.") from None
                self._in_flight = Computation(job, self, kept=kept)
            return self._in_flight

    def wait(self) -> None:
        """Wait for the compute in flight, if any."""
        computation, self._in_flight = self._in_flight, None
        if computation is not None:
            computation.wait()

    def compute(self, graph: Graph, inputs: dict | None = None) -> None:
        """Allocate, fill inputs ({tensor: numpy array}), compute and wait."""
        self.alloc(graph)
        for tensor, array in (inputs or {}).items():
            tensor.set(array)
        self.compute_async(graph)
        self.wait()

    @property
    def n_splits(self) -> int:
        return lib.ggml_backend_sched_get_n_splits(self.ptr)

    def buffer_size(self, backend: Backend) -> int:
        return lib.ggml_backend_sched_get_buffer_size(self.ptr, backend.ptr)

    def _check_size(self, graph: Graph) -> None:
        if graph.n_nodes > self.graph_size:
            raise GGMLError(f"The graph has {graph.n_nodes} nodes but this scheduler was made "
                            f"for at most {self.graph_size}.")

    def close(self) -> None:
        """Free the compute buffers; tensors they held are detached so reads raise."""
        if self._ptr is None:
            return
        try:
            self.wait()
        finally:
            if self._worker is not None:
                self._worker.shutdown()
            for ctx in list(self._allocated):
                if not ctx.closed:
                    _detach_compute_memory(ctx)
            ptr, self._ptr = self._ptr, None
            ffi.release(ptr)

    def __enter__(self) -> "Scheduler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _detach_compute_memory(ctx: Context) -> None:
    """Forget where ctx's tensors live in compute memory (everything but its own buffers)."""
    kept = [b.ptr for b in ctx.keepalive if isinstance(b, Buffer) and b._ptr is not None]
    lib.pyggml_detach(ctx.ptr, ffi.new("struct ggml_backend_buffer *[]", kept), len(kept))
