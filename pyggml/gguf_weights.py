"""GGUF files: metadata and tensors (gguf_reader.Header), tensor data into backend buffers.

Tensors placed on the CPU point straight into the memory-mapped file (no copy, no load time);
tensors placed on another device are copied in chunks. A progress callback sees bytes done.
"""

from __future__ import annotations

import dataclasses
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
        self._layouts: dict = {}

    def tensor_type(self, name: str) -> GGMLType:
        return GGMLType.parse(self.tensors_info[name].type)

    def tensor_shape(self, name: str) -> tuple[int, ...]:
        """numpy-order shape."""
        return tuple(reversed(self.tensors_info[name].ne))

    def load(self, placement: Placement = None, progress: Progress | None = None,
             use_mmap: bool = True, repack: Callable[[str], bool] | None = None,
             aliases: dict[str, str] | None = None) -> dict[str, "Tensor"]:  # noqa: F821
        """Create every tensor on the backend placement gives it (a Backend, or a function of
        the tensor name; the CPU by default) and fill it. Returns {name: Tensor}.

        CPU tensors point into the memory-mapped file unless use_mmap is False, or unless
        repack(name) says the tensor feeds matrix products and the CPU has a repacked layout
        for it (then it is copied into that layout, as llama.cpp does by default). aliases
        {new: existing} adds tensors that read another's data (a tied output matrix)."""
        if placement is None:
            placement = cpu_backend()
        where = placement if callable(placement) else (lambda name, backend=placement: backend)
        infos = list(self.header.tensors)
        for new, existing in (aliases or {}).items():
            if new not in self.tensors_info and existing in self.tensors_info:
                infos.append(dataclasses.replace(self.tensors_info[existing], name=new))
        groups: dict[tuple, tuple] = {}
        for info in infos:
            backend = where(info.name)
            layout = None
            if backend.is_cpu and use_mmap and repack is not None and repack(info.name):
                layout = self._repacked_layout(backend, info)
            key = (id(backend), layout.name if layout else None)
            groups.setdefault(key, (backend, layout, []))[2].append(info)
        total = sum(info.n_bytes for info in infos)
        done = [0]

        def advance(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress(done[0], total)

        loaded = {}
        for backend, layout, group in groups.values():
            ctx = Context(max_tensors=len(group), graphs=0)
            tensors = {info.name: ctx.new_tensor(info.type, tuple(reversed(info.ne)),
                                                 name=info.name) for info in group}
            if layout is not None:
                self._copy(ctx, Buffer(_alloc(ctx, layout), contexts=[ctx]), tensors, group,
                           advance, whole=True)
            elif backend.is_cpu and use_mmap:
                self._map(ctx, tensors, group, advance)
            else:
                self._copy(ctx, ctx.allocate(backend), tensors, group, advance)
            loaded.update(tensors)
        return loaded

    def _repacked_layout(self, backend: Backend, info):
        """The extra CPU buffer type that multiplies with this weight, if any (2-D only)."""
        if len(info.ne) != 2:
            return None
        key = (info.type, info.ne)
        if key not in self._layouts:
            self._layouts[key] = None
            for layout in backend.extra_buffer_types():
                with Context(max_tensors=4) as ctx:
                    weight = ctx.new_tensor(info.type, (info.ne[1], info.ne[0]))
                    product = weight.mul_mat(ctx.new_tensor("F32", (1, info.ne[0])))
                    if backend.supports_with(product, weight, layout):
                        self._layouts[key] = layout
                        break
        return self._layouts[key]

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

    def _copy(self, ctx: Context, buffer: Buffer, tensors: dict, infos: list, advance,
              whole: bool = False) -> None:
        """Copy tensor data into buffer, in chunks unless whole (repacking needs the
        whole tensor at once)."""
        buffer.mark_weights()
        if buffer not in ctx.keepalive:
            ctx.keepalive.append(buffer)
        data = self.data
        for info in infos:
            start, size = info.offset, info.n_bytes
            step = max(size, 1) if whole else CHUNK_BYTES
            for offset in range(0, size, step):
                chunk = np.asarray(data[start + offset:start + min(size, offset + step)])
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


def _alloc(ctx: Context, layout):
    raw = lib.ggml_backend_alloc_ctx_tensors_from_buft(ctx.ptr, layout.ptr)
    if raw == ffi.NULL:
        raise GGMLError(f"Could not allocate {layout.name} memory for {len(list(ctx.tensors()))}"
                        " repacked weights.")
    return raw
