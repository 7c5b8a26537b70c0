"""Device memory: the kinds a device offers (BufferType), buffers of them holding tensors
(Buffer), and allocate(), which gives tensors memory of a kind. A Buffer owns its C object and
frees it on close() or when collected; a BufferType belongs to its device.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lib import ffi, lib
from .errors import GGMLError

if TYPE_CHECKING:
    from .backend import Device


def c_text(value) -> str:
    """A C string ggml returns, as text ("" for NULL)."""
    return "" if value == ffi.NULL else ffi.string(value).decode(errors="replace")


class BufferType:
    """A kind of memory of a device (ggml_backend_buffer_type); owned by the device. Get it
    from Device.buffer_type() or Device.extra_buffer_types()."""

    def __init__(self, ptr, device: Device):
        self.ptr = ptr
        self.device = device
        self.name = c_text(lib.ggml_backend_buft_name(ptr))

    def __eq__(self, other) -> bool:
        return isinstance(other, BufferType) and self.ptr == other.ptr

    def __hash__(self) -> int:
        return hash(int(ffi.cast("uintptr_t", self.ptr)))

    @property
    def is_host(self) -> bool:
        return bool(lib.ggml_backend_buft_is_host(self.ptr))

    @property
    def device_name(self) -> str:
        """The name of the device this memory belongs to ('CPU', 'CUDA0', 'RPC0', ...)."""
        return self.device.name

    @property
    def alignment(self) -> int:
        return lib.ggml_backend_buft_get_alignment(self.ptr)

    @property
    def max_size(self) -> int:
        """The largest single buffer this memory allocates."""
        return lib.ggml_backend_buft_get_max_size(self.ptr)

    def alloc_size(self, tensor) -> int:
        """Bytes tensor takes in this memory (devices may pad rows), aligned."""
        size = lib.ggml_backend_buft_get_alloc_size(self.ptr, tensor.ptr)
        align = self.alignment
        return -(-size // align) * align

    def dummy(self):
        """A raw buffer of size 0 (free it with ggml_backend_buffer_free); see Buffer.dummy."""
        return lib.ggml_backend_buft_alloc_buffer(self.ptr, 0)

    def __repr__(self) -> str:
        return f"<BufferType {self.name}>"


class Buffer:
    """Device memory holding the tensors of some contexts. Closing it detaches them, so a
    later read raises instead of touching freed memory."""

    def __init__(self, ptr, contexts=(), tensors=(), keep=None):
        self._ptr = ffi.gc(ptr, lib.ggml_backend_buffer_free)
        self._contexts = list(contexts)
        self._tensors = list(tensors)
        self._keep = keep           # e.g. the memory map a CPU buffer points into

    @classmethod
    def dummy(cls, buffer_type: BufferType, tensors) -> "Buffer":
        """A buffer of size 0 that tensors point at: they count as placed in buffer_type's
        memory (for measuring a graph without allocating: ggml's scheduler then assigns their
        operations to its device) but hold no data. Closing it detaches them again."""
        raw = buffer_type.dummy()
        if raw == ffi.NULL:
            raise GGMLError(f"Could not make a placeholder buffer of {buffer_type.name}.")
        tensors = list(tensors)
        for tensor in tensors:
            tensor.ptr.buffer = raw
        return cls(raw, tensors=tensors)

    @property
    def ptr(self):
        if self._ptr is None:
            raise GGMLError("This buffer was closed.")
        return self._ptr

    @property
    def size(self) -> int:
        return lib.ggml_backend_buffer_get_size(self.ptr)

    @property
    def name(self) -> str:
        return c_text(lib.ggml_backend_buffer_name(self.ptr))

    @property
    def is_host(self) -> bool:
        return bool(lib.ggml_backend_buffer_is_host(self.ptr))

    def mark_weights(self) -> None:
        """Tell the scheduler this buffer holds weights (ops may move to its device)."""
        lib.ggml_backend_buffer_set_usage(self.ptr, lib.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)

    def clear(self, value: int = 0) -> None:
        lib.ggml_backend_buffer_clear(self.ptr, value)

    def close(self) -> None:
        if self._ptr is None:
            return
        raw = self._ptr
        tensors = [t.ptr for t in self._tensors if not t.context.closed]
        for ctx in self._contexts:
            if not ctx.closed:
                tensors += [t.ptr for t in ctx.tensors()]
        for tensor in tensors:
            if tensor.buffer == raw:
                tensor.buffer, tensor.data = ffi.NULL, ffi.NULL
        self._ptr = None
        ffi.release(raw)
        self._keep = None

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def allocate(buffer_type: BufferType, tensors) -> list[Buffer]:
    """Give tensors memory of buffer_type: one buffer, or several where they exceed the
    largest buffer that memory allocates. The tensors keep the buffers alive."""
    tensors = list(tensors)
    sizes = [buffer_type.alloc_size(t) for t in tensors]
    limit = buffer_type.max_size
    buffers, start = [], 0
    while start < len(tensors):
        end, total = start, 0
        while end < len(tensors) and (end == start or total + sizes[end] <= limit):
            total += sizes[end]
            end += 1
        raw = lib.ggml_backend_buft_alloc_buffer(buffer_type.ptr, total + buffer_type.alignment)
        if raw == ffi.NULL:
            raise GGMLError(f"Could not allocate {total / 2**20:.1f} MiB of {buffer_type.name} "
                            f"memory for {end - start} tensors (out of memory).")
        buffer = Buffer(raw, tensors=tensors[start:end])
        allocator = lib.ggml_tallocr_new(raw)
        for tensor in tensors[start:end]:
            if lib.ggml_tallocr_alloc(ffi.addressof(allocator), tensor.ptr) != \
                    lib.GGML_STATUS_SUCCESS:
                raise GGMLError(f"Could not place {tensor.name} in {buffer_type.name} memory.")
        for context in {id(t.context): t.context for t in tensors[start:end]}.values():
            context.keepalive.append(buffer)
        buffers.append(buffer)
        start = end
    return buffers
