"""Devices, backends and buffers.

Devices are enumerated from ggml's registry (ordered as ggml orders them: GPUs first, the CPU
last). A Backend is a device opened for compute; a Buffer is device memory holding tensors.
Each owns its C object and frees it on close() or when collected.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from ._ggml import ffi, lib
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


def devices() -> list[Device]:
    found = []
    for index in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(index)
        free, total = ffi.new("size_t *"), ffi.new("size_t *")
        lib.ggml_backend_dev_memory(dev, free, total)
        found.append(Device(
            index=index, name=_text(lib.ggml_backend_dev_name(dev)),
            description=_text(lib.ggml_backend_dev_description(dev)),
            type=DEVICE_TYPES.get(lib.ggml_backend_dev_type(dev), "other"),
            backend=_text(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))),
            memory_free=free[0], memory_total=total[0]))
    return found


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
             for name, feats in backend_features().items()]
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
        dev = dev or device("cpu")
        raw = lib.ggml_backend_dev_init(lib.ggml_backend_dev_get(dev.index), ffi.NULL)
        if raw == ffi.NULL:
            raise GGMLError(f"Could not open the device {dev.name} ({dev.description}).")
        self._ptr = ffi.gc(raw, lib.ggml_backend_free)
        self.device = dev
        self.name = _text(lib.ggml_backend_name(raw))
        if self.is_cpu:
            self.threads = threads or default_threads()
            lib.ggml_backend_cpu_set_n_threads(raw, self.threads)

    @property
    def ptr(self):
        if self._ptr is None:
            raise GGMLError(f"The backend {self.name} was closed.")
        return self._ptr

    @property
    def is_cpu(self) -> bool:
        return bool(lib.ggml_backend_is_cpu(self.ptr))

    def set_threads(self, threads: int) -> None:
        if not self.is_cpu:
            raise GGMLError(f"Only the CPU backend takes a thread count, not {self.name}.")
        if threads < 1:
            raise ValueError(f"A thread count must be at least 1, not {threads}.")
        self.threads = threads
        lib.ggml_backend_cpu_set_n_threads(self.ptr, threads)

    def extra_buffer_types(self) -> list:
        """Buffer types this device offers besides its default (the CPU's repacked weight
        layouts, for instance), as ggml handles with .name."""
        dev = lib.ggml_backend_get_device(self.ptr)
        reg = lib.ggml_backend_dev_backend_reg(dev)
        getter = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
        if getter == ffi.NULL:
            return []
        bufts = ffi.cast("ggml_backend_dev_get_extra_bufts_t", getter)(dev)
        found = []
        while bufts != ffi.NULL and bufts[0] != ffi.NULL:
            found.append(BufferType(bufts[0]))
            bufts += 1
        return found

    def supports_with(self, op, tensor, buffer_type: "BufferType") -> bool:
        """Whether this device computes op when tensor (one of op's sources) lives in a
        buffer of buffer_type (the probe llama.cpp uses to place weights)."""
        dummy = lib.ggml_backend_buft_alloc_buffer(buffer_type.ptr, 0)
        raw = tensor.ptr
        raw.buffer = dummy
        try:
            return bool(lib.ggml_backend_dev_supports_op(lib.ggml_backend_get_device(self.ptr),
                                                         op.ptr))
        finally:
            raw.buffer = ffi.NULL
            lib.ggml_backend_buffer_free(dummy)

    def supports(self, tensor) -> bool:
        """Whether this backend can compute tensor's operation with its operand types."""
        return bool(lib.ggml_backend_supports_op(self.ptr, tensor.ptr))

    def close(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            ffi.release(ptr)

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Backend {self.name} on {self.device.description}>"


class BufferType:
    """A kind of device memory (ggml_backend_buffer_type); owned by its backend."""

    def __init__(self, ptr):
        self.ptr = ptr
        self.name = _text(lib.ggml_backend_buft_name(ptr))

    def __repr__(self) -> str:
        return f"<BufferType {self.name}>"


def cpu_backend(threads: int | None = None) -> Backend:
    return Backend(device("cpu"), threads)


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


class Buffer:
    """Device memory holding the tensors of some contexts. Closing it detaches them, so a
    later read raises instead of touching freed memory."""

    def __init__(self, ptr, contexts=(), tensors=(), keep=None):
        self._ptr = ffi.gc(ptr, lib.ggml_backend_buffer_free)
        self._contexts = list(contexts)
        self._tensors = list(tensors)
        self._keep = keep           # e.g. the memory map a CPU buffer points into

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
