"""Devices, backends and buffers.

Devices are enumerated from ggml's registry (ordered as ggml orders them: GPUs first, the CPU
last). A Backend is a device opened for compute; a Buffer is device memory holding tensors.
Each owns its C object and frees it on close() or when collected.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from ._lib import ffi, lib
from .cpus import default_threads, usable_threads
from .errors import GGMLError

log = logging.getLogger("pyggml")

DEVICE_TYPES = {
    lib.GGML_BACKEND_DEVICE_TYPE_CPU: "cpu",
    lib.GGML_BACKEND_DEVICE_TYPE_GPU: "gpu",
    lib.GGML_BACKEND_DEVICE_TYPE_IGPU: "igpu",
    lib.GGML_BACKEND_DEVICE_TYPE_ACCEL: "accel",
}


def _text(value) -> str:
    return "" if value == ffi.NULL else ffi.string(value).decode(errors="replace")


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    description: str
    type: str
    backend: str
    memory_free: int
    memory_total: int

    def open(self, threads: int | None = None) -> "Backend":
        """A backend computing on this device (threads applies to the CPU)."""
        return Backend(self, threads)

    @property
    def ptr(self):
        return lib.ggml_backend_dev_get(self.index)

    @property
    def is_cpu(self) -> bool:
        return self.type == "cpu"

    @property
    def endpoint(self) -> str | None:
        """host:port of the RPC server this device lives on (None for a local device)."""
        return self.description if self.backend == "RPC" else None

    def buffer_type(self) -> "BufferType":
        """The device's own memory (what its backend allocates by default)."""
        raw = lib.ggml_backend_dev_buffer_type(self.ptr)
        if raw == ffi.NULL:
            raise GGMLError(f"The device {self.name} ({self.description}) gave no buffer type; "
                            "if it is an RPC server, it is unreachable.")
        return BufferType(raw, self)

    def extra_buffer_types(self) -> list["BufferType"]:
        """Buffer types this device offers besides its default (the CPU's repacked weight
        layouts, for instance), best first."""
        reg = lib.ggml_backend_dev_backend_reg(self.ptr)
        getter = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
        if getter == ffi.NULL:
            return []
        bufts = ffi.cast("ggml_backend_dev_get_extra_bufts_t", getter)(self.ptr)
        found = []
        while bufts != ffi.NULL and bufts[0] != ffi.NULL:
            found.append(BufferType(bufts[0], self))
            bufts += 1
        return found

    def supports(self, op) -> bool:
        """Whether this device computes op (a graph node) with its operands as they are."""
        return bool(lib.ggml_backend_dev_supports_op(self.ptr, op.ptr))

    def supports_with(self, op, tensor, buffer_type: "BufferType") -> bool:
        """Whether this device computes op when tensor (one of op's sources) lives in a
        buffer of buffer_type (the probe llama.cpp uses to place weights)."""
        raw = tensor.ptr
        saved = raw.buffer
        dummy = buffer_type.dummy()
        raw.buffer = dummy
        try:
            return bool(lib.ggml_backend_dev_supports_op(self.ptr, op.ptr))
        finally:
            raw.buffer = saved
            lib.ggml_backend_buffer_free(dummy)


def devices() -> list[Device]:
    """Every device, with its memory now (an RPC server's is asked over the network)."""
    return [device_at(index) for index in range(lib.ggml_backend_dev_count())]


def device_at(index: int) -> Device:
    dev = lib.ggml_backend_dev_get(index)
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    lib.ggml_backend_dev_memory(dev, free, total)
    return Device(
        index=index, name=_text(lib.ggml_backend_dev_name(dev)),
        description=_text(lib.ggml_backend_dev_description(dev)),
        type=DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "other"),
        backend=_text(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))),
        memory_free=free[0], memory_total=total[0])


def cpu_device() -> Device:
    """The CPU (found without asking every device for its memory)."""
    for index in range(lib.ggml_backend_dev_count()):
        if lib.ggml_backend_dev_type(lib.ggml_backend_dev_get(index)) == \
                lib.GGML_BACKEND_DEVICE_TYPE_CPU:
            return device_at(index)
    raise GGMLError("This build of ggml has no CPU device.")


def device(name_or_type: str) -> Device:
    """The first device whose name (e.g. 'CUDA0') or type ('cpu', 'gpu') matches."""
    for dev in devices():
        if name_or_type in (dev.name, dev.type):
            return dev
    known = ", ".join(f"{d.name} ({d.type})" for d in devices())
    raise GGMLError(f"No device named {name_or_type!r}; this build has: {known}.")


def backend_features() -> dict[str, dict[str, str]]:
    """Each registered backend's build features, e.g. {'CPU': {'AVX2': '1', ...}}."""
    features = {}
    for index in range(lib.ggml_backend_reg_count()):
        reg = lib.ggml_backend_reg_get(index)
        name = _text(lib.ggml_backend_reg_name(reg))
        getter = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features")
        entries = {}
        if getter != ffi.NULL:
            feature = ffi.cast("ggml_backend_get_features_t", getter)(reg)
            while feature != ffi.NULL and feature.name != ffi.NULL:
                entries[_text(feature.name)] = _text(feature.value)
                feature += 1
        features[name] = entries
    return features


def system_info() -> str:
    """One line per backend with its features, then one per device, like llama.cpp's."""
    lines = [f"{name} : " + " | ".join(f"{k} = {v}" for k, v in feats.items())
             for name, feats in backend_features().items() if feats]
    lines += [f"device {d.index}: {d.name} ({d.type}, {d.backend}) {d.description}, "
              f"{d.memory_free / 2**30:.1f} of {d.memory_total / 2**30:.1f} GiB free"
              for d in devices()]
    return "\n".join(lines)


def log_system_info() -> None:
    for name, feats in backend_features().items():
        log.info("backend", extra={"backend": name, "features": feats})
    for dev in devices():
        log.info("device", extra={"device": dev.name, "type": dev.type, "backend": dev.backend,
                                  "description": dev.description,
                                  "memory_total": dev.memory_total,
                                  "memory_free": dev.memory_free})


class Backend:
    """A device opened for compute."""

    def __init__(self, dev: Device | None = None, threads: int | None = None):
        dev = dev or cpu_device()
        raw = lib.ggml_backend_dev_init(lib.ggml_backend_dev_get(dev.index), ffi.NULL)
        if raw == ffi.NULL:
            raise GGMLError(f"Could not open the device {dev.name} ({dev.description}).")
        self._ptr = ffi.gc(raw, lib.ggml_backend_free)
        self.device = dev
        self.name = _text(lib.ggml_backend_name(raw))
        self._pool = None
        if self.is_cpu:
            self.set_threads(threads or default_threads())

    @property
    def ptr(self):
        if self._ptr is None:
            raise GGMLError(f"The backend {self.name} was closed.")
        return self._ptr

    @property
    def is_cpu(self) -> bool:
        return bool(lib.ggml_backend_is_cpu(self.ptr))

    def set_threads(self, threads: int) -> None:
        """The CPU's thread count. Without OpenMP the backend keeps a pool of that many
        threads, made here once (as llama.cpp's tools do) rather than for every graph."""
        if not self.is_cpu:
            raise GGMLError(f"Only the CPU backend takes a thread count, not {self.name}.")
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"A thread count must be a positive integer, not {threads!r}.")
        self.threads = threads = usable_threads(threads)
        lib.ggml_backend_cpu_set_n_threads(self.ptr, threads)
        if not uses_openmp():
            params = lib.ggml_threadpool_params_default(threads)
            pool = lib.ggml_threadpool_new(ffi.addressof(params))
            if pool == ffi.NULL:
                raise GGMLError(f"Could not start a pool of {threads} CPU threads.")
            lib.ggml_backend_cpu_set_threadpool(self.ptr, pool)
            self._free_pool()
            self._pool = pool

    def supports(self, tensor) -> bool:
        """Whether this backend can compute tensor's operation with its operand types."""
        return bool(lib.ggml_backend_supports_op(self.ptr, tensor.ptr))

    def failure(self) -> str | None:
        """Why this backend can no longer compute (an RPC server that went away), or None."""
        endpoint = self.device.endpoint
        if endpoint is None:
            return None                          # a local device does not go away
        lost = rpc_function("ggml_backend_rpc_connection_lost",
                            "ggml_backend_rpc_connection_lost_t")
        if lost(endpoint.encode()):
            return (f"the RPC server at {endpoint} (device {self.device.name}) stopped "
                    "answering; what lived there must be set up again once it is back")
        return None

    def close(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            ffi.release(ptr)
            self._free_pool()

    def _free_pool(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            lib.ggml_threadpool_free(pool)

    def __del__(self) -> None:
        self._free_pool()       # after the backend itself: attributes go in order, ptr first

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Backend {self.name} on {self.device.description}>"


class BufferType:
    """A kind of memory of a device (ggml_backend_buffer_type); owned by the device. Get it
    from Device.buffer_type() or Device.extra_buffer_types()."""

    def __init__(self, ptr, device: Device):
        self.ptr = ptr
        self.device = device
        self.name = _text(lib.ggml_backend_buft_name(ptr))

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


@functools.cache
def rpc_function(name: str, ctype: str):
    """A function of ggml's RPC backend, found through its registry (rpc.py calls them)."""
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    if reg == ffi.NULL:
        raise GGMLError("This build of ggml has no RPC backend; rebuild with "
                        "-C cmake.define.GGML_RPC=ON.")
    address = lib.ggml_backend_reg_get_proc_address(reg, name.encode())
    if address == ffi.NULL:
        raise GGMLError(f"The RPC backend of this build lacks {name}.")
    return ffi.cast(ctype, address)


def cpu_backend(threads: int | None = None) -> Backend:
    return Backend(cpu_device(), threads)


@functools.cache
def uses_openmp() -> bool:
    """Whether this build's CPU backend runs its threads through OpenMP."""
    return backend_features().get("CPU", {}).get("OPENMP") == "1"


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
        return _text(lib.ggml_backend_buffer_name(self.ptr))

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


log_system_info()                   # once, when the library is first loaded
