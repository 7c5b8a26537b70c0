"""GGUF files: metadata and tensors (gguf_reader.Header), tensor data into backend buffers.

Tensors placed on the CPU point straight into the memory-mapped file (no copy, no load time);
tensors placed on another device are copied in chunks. A progress callback sees bytes done.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Union

import numpy as np

from ._ggml import ffi, lib
from .backend import Backend, Buffer, cpu_backend
from .context import Context
from .dtypes import GGMLType
from .errors import GGMLError
from .gguf_reader import Header

Placement = Union[Backend, Callable[[str], Backend], None]
Progress = Callable[[int, int], None]
CHUNK_BYTES = 64 << 20


class GGUFFile:
    """An open GGUF file: metadata, tensor descriptions, and loading into backends."""

    def __init__(self, path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"No GGUF file at {self.path}.")
        self.header = Header(self.path)
        self.metadata = self.header.metadata
        self.tensors_info = {t.name: t for t in self.header.tensors}
        self.data = np.frombuffer(self.header.map, dtype=np.uint8)
        self._buffers: list[Buffer] = []

    def tensor_type(self, name: str) -> GGMLType:
        return GGMLType.parse(self.tensors_info[name].type)

    def tensor_shape(self, name: str) -> tuple[int, ...]:
        """numpy-order shape."""
        return tuple(reversed(self.tensors_info[name].ne))

    def load(self, placement: Placement = None, progress: Progress | None = None,
             use_mmap: bool = True) -> dict[str, "Tensor"]:  # noqa: F821
        """Create every tensor on the backend placement gives it (a Backend, or a function of
        the tensor name; the CPU by default) and fill it. Returns {name: Tensor}.

        CPU tensors point into the memory-mapped file unless use_mmap is False."""
        if placement is None:
            placement = cpu_backend()
        where = placement if callable(placement) else (lambda name, backend=placement: backend)
        groups: dict[int, tuple[Backend, list]] = {}
        for info in self.header.tensors:
            backend = where(info.name)
            groups.setdefault(id(backend), (backend, []))[1].append(info)
        total = sum(info.n_bytes for info in self.header.tensors)
        done = [0]

        def advance(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress(done[0], total)

        loaded = {}
        for backend, infos in groups.values():
            ctx = Context(max_tensors=len(infos), graphs=0)
            tensors = {info.name: ctx.new_tensor(self.tensor_type(info.name),
                                                 self.tensor_shape(info.name), name=info.name)
                       for info in infos}
            if backend.is_cpu and use_mmap:
                self._map(ctx, tensors, infos, advance)
            else:
                self._copy(ctx, backend, tensors, infos, advance)
            loaded.update(tensors)
        return loaded

    def _map(self, ctx: Context, tensors: dict, infos: list, advance) -> None:
        data = self.data
        base = ffi.cast("char *", data.ctypes.data)
        raw = lib.ggml_backend_cpu_buffer_from_ptr(base, data.nbytes)
        if raw == ffi.NULL:
            raise GGMLError(f"Could not map {self.path} into a CPU buffer.")
        buffer = Buffer(raw, contexts=[ctx], keep=self.header)
        buffer.mark_weights()
        for info in infos:
            status = lib.ggml_backend_tensor_alloc(raw, tensors[info.name].ptr, base + info.offset)
            if status != lib.GGML_STATUS_SUCCESS:
                raise GGMLError(f"Could not place tensor {info.name} in the mapped file.")
            advance(info.n_bytes)
        ctx.keepalive.append(buffer)
        self._buffers.append(buffer)

    def _copy(self, ctx: Context, backend: Backend, tensors: dict, infos: list, advance) -> None:
        buffer = ctx.allocate(backend)
        buffer.mark_weights()
        data = self.data
        for info in infos:
            start, size = info.offset, info.n_bytes
            for offset in range(0, size, CHUNK_BYTES):
                chunk = np.asarray(data[start + offset:start + min(size, offset + CHUNK_BYTES)])
                lib.ggml_backend_tensor_set(tensors[info.name].ptr, ffi.from_buffer(chunk),
                                            offset, chunk.nbytes)
                advance(chunk.nbytes)
        self._buffers.append(buffer)

    def close(self) -> None:
        for buffer in self._buffers:
            buffer.close()
        self._buffers.clear()

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
