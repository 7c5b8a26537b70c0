"""GGUF files: metadata and tensors (gguf_reader.Header), tensor data into backend buffers.

Loading is two steps, so that a caller can decide where each tensor goes from how it is used:
tensors() describes every tensor in one storage context, without memory; place() gives each
one memory of the buffer type chosen for it and fills it. Tensors in the CPU's own memory
point straight into the memory-mapped file (no copy, no load time); tensors elsewhere (a GPU,
an RPC server, the CPU's repacked layouts) are copied, in chunks, and a progress callback sees
the bytes done. load() does both for one backend.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from ._lib import ffi, lib
from .backend import Backend, cpu_backend, cpu_device
from .memory import Buffer, BufferType, allocate
from .context import Context
from .dtypes import GGMLType
from .errors import GGMLError
from .gguf_reader import Header, TensorInfo

if TYPE_CHECKING:
    from .tensor import Tensor

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
        self._infos: dict[str, TensorInfo] = {}

    def tensor_type(self, name: str) -> GGMLType:
        return GGMLType.parse(self.tensors_info[name].type)

    def tensor_shape(self, name: str) -> tuple[int, ...]:
        """numpy-order shape."""
        return tuple(reversed(self.tensors_info[name].ne))

    def read(self, name: str) -> np.ndarray:
        """An F32 or F16 tensor's values as float32, straight from the mapped file (for small
        constants a graph takes as parameters rather than tensors)."""
        kinds = {GGMLType.F32: np.float32, GGMLType.F16: np.float16}
        kind = self.tensor_type(name)
        if kind not in kinds:
            raise ValueError(f"The tensor {name} is {kind.name}; only F32 and F16 tensors are "
                             "read directly.")
        shape = self.tensor_shape(name)
        values = np.frombuffer(self.data, kinds[kind], count=int(np.prod(shape)),
                               offset=self.tensors_info[name].offset)
        return values.reshape(shape).astype(np.float32)

    def tensors(self, aliases: dict[str, str] | None = None) -> dict[str, Tensor]:
        """Every tensor of the file, described in one storage context but without memory.
        aliases {new: existing} adds tensors that read another's data (a tied output matrix,
        which may then live on another device or in another layout than the original)."""
        infos = list(self.header.tensors)
        for new, existing in (aliases or {}).items():
            if new not in self.tensors_info and existing in self.tensors_info:
                infos.append(dataclasses.replace(self.tensors_info[existing], name=new))
        ctx = Context(max_tensors=len(infos), graphs=0)
        found = {}
        for info in infos:
            found[info.name] = ctx.new_tensor(info.type, tuple(reversed(info.ne)), name=info.name)
            self._infos[info.name] = info
        return found

    def place(self, tensors: dict, buffer_type: Callable[[str], BufferType],
              progress: Progress | None = None, use_mmap: bool = True) -> None:
        """Give each tensor memory of buffer_type(name) and fill it from the file. The CPU's
        own memory maps the file unless use_mmap is False."""
        groups: dict[BufferType, list] = {}
        for name in tensors:
            groups.setdefault(buffer_type(name), []).append(name)
        total = sum(self._infos[name].n_bytes for name in tensors)
        done = [0]

        def advance(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress(done[0], total)

        cpu_memory = cpu_device().buffer_type()
        for layout, names in groups.items():
            group = [tensors[name] for name in names]
            if use_mmap and layout == cpu_memory:
                buffers = [self._map(group)]
                advance(sum(self._infos[t.name].n_bytes for t in group))
            else:
                buffers = allocate(layout, group)
                for buffer in buffers:
                    buffer.mark_weights()
                # CPU memory (a repacked layout converts whole tensors) takes each tensor at
                # once from the map; other devices take chunks, to keep host memory low
                self._copy(group, advance, whole=layout.device.is_cpu)
            self._buffers += buffers

    def load(self, placement: Backend | None = None, progress: Progress | None = None,
             use_mmap: bool = True, repack: Callable[[str], bool] | None = None,
             aliases: dict[str, str] | None = None) -> dict[str, Tensor]:
        """Every tensor on one backend's device (the CPU by default), filled. repack(name):
        the tensor feeds matrix products, so take the CPU's repacked layout for it where the
        CPU has one (as llama.cpp does by default). Returns {name: Tensor}."""
        device = (placement or cpu_backend()).device
        tensors = self.tensors(aliases)
        memory = device.buffer_type()
        layouts = {name: repacked_layout(device, tensor) if repack and repack(name) else None
                   for name, tensor in tensors.items()}
        self.place(tensors, lambda name: layouts[name] or memory, progress, use_mmap)
        return tensors

    def _map(self, tensors: list) -> Buffer:
        data = self.data
        base = ffi.cast("char *", data.ctypes.data)
        raw = lib.ggml_backend_cpu_buffer_from_ptr(base, data.nbytes)
        if raw == ffi.NULL:
            raise GGMLError(f"Could not map {self.path} into a CPU buffer.")
        buffer = Buffer(raw, tensors=tensors, keep=self.header)
        buffer.mark_weights()
        tensors[0].context.keepalive.append(buffer)      # the tensors keep the map alive
        for tensor in tensors:
            info = self._infos[tensor.name]
            status = lib.ggml_backend_tensor_alloc(raw, tensor.ptr, base + info.offset)
            if status != lib.GGML_STATUS_SUCCESS:
                raise GGMLError(f"Could not place tensor {info.name} in the mapped file.")
        return buffer

    def _copy(self, tensors: list, advance, whole: bool) -> None:
        data = self.data
        for tensor in tensors:
            info = self._infos[tensor.name]
            start, size = info.offset, info.n_bytes
            step = max(size, 1) if whole else CHUNK_BYTES
            for offset in range(0, size, step):
                chunk = np.asarray(data[start + offset:start + min(size, offset + step)])
                lib.ggml_backend_tensor_set(tensor.ptr, ffi.from_buffer(chunk), offset,
                                            chunk.nbytes)
                advance(chunk.nbytes)

    def close(self) -> None:
        for buffer in self._buffers:
            buffer.close()
        self._buffers.clear()

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def repacked_layout(device, tensor) -> BufferType | None:
    """The device's extra buffer type (the CPU's repacked layouts) that multiplies with this
    2-D weight, if any."""
    if len(tensor.shape) != 2:
        return None
    rows, columns = tensor.shape
    for layout in device.extra_buffer_types():
        with Context(max_tensors=4) as ctx:
            weight = ctx.new_tensor(tensor.dtype, (rows, columns))
            product = weight.mul_mat(ctx.new_tensor("F32", (1, columns)))
            if device.supports_with(product, weight, layout):
                return layout
    return None
