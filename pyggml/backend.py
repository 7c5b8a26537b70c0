"""Devices and backends.

Devices are enumerated from ggml's registry (ordered as ggml orders them: GPUs first, the CPU
last). A Backend is a device opened for compute and owns its C object, freed on close() or when
collected; a device's memory and the buffers made of it are memory.py's.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from ._lib import ffi, lib
from .cpus import default_threads, usable_threads
from .errors import GGMLError
from .memory import BufferType, c_text

log = logging.getLogger("pyggml")

DEVICE_TYPES = {
    lib.GGML_BACKEND_DEVICE_TYPE_CPU: "cpu",
    lib.GGML_BACKEND_DEVICE_TYPE_GPU: "gpu",
    lib.GGML_BACKEND_DEVICE_TYPE_IGPU: "igpu",
    lib.GGML_BACKEND_DEVICE_TYPE_ACCEL: "accel",
}


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
        index=index, name=c_text(lib.ggml_backend_dev_name(dev)),
        description=c_text(lib.ggml_backend_dev_description(dev)),
        type=DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "other"),
        backend=c_text(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))),
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
        name = c_text(lib.ggml_backend_reg_name(reg))
        getter = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features")
        entries = {}
        if getter != ffi.NULL:
            feature = ffi.cast("ggml_backend_get_features_t", getter)(reg)
            while feature != ffi.NULL and feature.name != ffi.NULL:
                entries[c_text(feature.name)] = c_text(feature.value)
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
        self.name = c_text(lib.ggml_backend_name(raw))
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


log_system_info()                   # once, when the library is first loaded
