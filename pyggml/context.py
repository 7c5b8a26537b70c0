"""Context: the arena that holds tensor and graph metadata (never tensor data).

Contexts are always created with no_alloc: tensor memory lives in backend buffers
(Context.allocate) or in a scheduler's compute buffers (Scheduler.alloc).
"""

from __future__ import annotations

from ._lib import ffi, lib
from .dtypes import GGMLType
from .errors import GGMLError, ensure, failure_text
from .graph import Graph
from .memory import Buffer
from .shape import ne_of
from .tensor import Tensor

DEFAULT_GRAPH_SIZE = lib.GGML_DEFAULT_GRAPH_SIZE


class Context:
    """Room for max_tensors tensors and `graphs` graphs of graph_size nodes each.

    A context with room for no graph (graphs=0) holds storage: weights, caches. Operations
    on its tensors build their results in the context of an operand that is not storage;
    for operations on storage alone (a view of a cache), bind() the tensor to a graph's
    context first.
    """

    def __init__(self, max_tensors: int = 2048, graph_size: int = DEFAULT_GRAPH_SIZE,
                 graphs: int = 1):
        if max_tensors < 1 or graph_size < 1 or graphs < 0:
            raise ValueError(f"A context needs max_tensors >= 1, graph_size >= 1 and graphs >= 0,"
                             f" not {max_tensors}, {graph_size}, {graphs}.")
        mem_size = (max_tensors * lib.ggml_tensor_overhead()
                    + graphs * lib.ggml_graph_overhead_custom(graph_size, False))
        params = ffi.new("struct ggml_init_params *", {"mem_size": mem_size, "no_alloc": True})
        raw = ensure(lib.safe_ggml_init(params[0]), "creating a ggml context",
                     f"{mem_size} bytes of metadata")
        self._ptr = ffi.gc(raw, lib.ggml_free)
        self.graph_size = graph_size
        self.storage = graphs == 0
        self._bound: set[int] = set()
        self.keepalive: list = []   # buffers and schedulers that hold this context's data
        # index tensors (get_rows, set_rows, mul_mat_id) -> exclusive upper bound of their
        # values: ggml's kernels abort the process on an out-of-range index, so set() checks
        self.index_limits: dict = {}
        # index inputs given fresh (garbage) memory by a scheduler and not set since
        self.unfilled: dict = {}
        self.placements: dict = {}  # node -> the Backend a scheduler must run it on
        # while a compute of this graph's memory is in flight, the inputs set for the next one
        # ((tensor, array) pairs: the compute thread copies them in as that one starts)
        self.staged: list | None = None

    @property
    def ptr(self):
        if self._ptr is None:
            raise GGMLError("This context was closed; its tensors can no longer be used.")
        return self._ptr

    @property
    def closed(self) -> bool:
        return self._ptr is None

    def close(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            ffi.release(ptr)
            self.keepalive.clear()
            self.index_limits.clear()
            self.unfilled.clear()
            self.placements.clear()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def new_tensor(self, dtype, shape, name: str | None = None):
        """A tensor of numpy-order shape (1 to 4 dimensions) and ggml type dtype."""
        dtype = GGMLType.parse(dtype)
        ne = ne_of(shape)
        if ne[0] % dtype.block_size:
            raise ValueError(f"The last dimension of a {dtype.name} tensor must be a multiple of "
                             f"{dtype.block_size}, not {ne[0]} (shape {tuple(shape)}).")
        raw = lib.safe_ggml_new_tensor_4d(self.ptr, dtype, *ne)
        if not raw:
            raise GGMLError(failure_text("creating a tensor", f"{dtype.name} shape "
                                         f"{tuple(shape)}{self.fullness()}"))
        tensor = Tensor(raw, self, len(shape))
        if name is not None:
            tensor.name = name
        return tensor

    def fullness(self) -> str:
        """'; the context is full ...' when no tensor fits any more, else ''."""
        ptr = self.ptr
        if lib.ggml_get_mem_size(ptr) - lib.ggml_used_mem(ptr) >= lib.ggml_tensor_overhead():
            return ""
        if self.storage:
            return ("; the context is full: it holds storage, so bind() its tensor to a graph's "
                    "context before operating on it alone")
        return "; the context is full: create it with a larger max_tensors"

    def bind(self, tensor):
        """The same ggml tensor, with operations on it built in this context (this context
        keeps the tensor's own context alive)."""
        owner = tensor.context
        if owner is not self and id(owner) not in self._bound:
            self._bound.add(id(owner))
            self.keepalive.append(owner)
        return Tensor(tensor.ptr, self, tensor.ndim)

    def tensors(self):
        """Every tensor of this context, in creation order."""
        raw = lib.ggml_get_first_tensor(self.ptr)
        while raw != ffi.NULL:
            yield Tensor(raw, self, max(1, lib.ggml_n_dims(raw)))
            raw = lib.ggml_get_next_tensor(self.ptr, raw)

    def allocate(self, backend):
        """Place every tensor of this context in one new buffer of backend's device."""
        buft = lib.ggml_backend_get_default_buffer_type(backend.ptr)
        size = lib.ggml_backend_alloc_ctx_tensors_from_buft_size(self.ptr, buft)
        raw = lib.ggml_backend_alloc_ctx_tensors(self.ptr, backend.ptr)
        if raw == ffi.NULL:
            raise GGMLError(f"Could not allocate {size} bytes on {backend.name} for this "
                            "context's tensors (out of memory, or nothing left to allocate).")
        buffer = Buffer(raw, contexts=[self])
        self.keepalive.append(buffer)
        return buffer

    def place(self, tensor, backend) -> None:
        """Run tensor's operation on backend (a device's; otherwise the scheduler decides),
        in every graph of this context a scheduler allocates."""
        self.placements[tensor.ptr] = backend

    def graph(self, *outputs, size: int | None = None):
        return Graph(self, outputs, size or self.graph_size)
