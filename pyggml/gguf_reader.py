"""Read a GGUF file's header: metadata and tensor descriptions, memory-mapped.

Why not gguf.GGUFReader: it builds a numpy view for every element of every array, which
takes 6 s for SmolLM2's 49,152-token vocabulary (and grows with Gemma's 262,144). This reads
the same format (the constants come from the gguf package) in a tight loop, and reads
numeric arrays with one numpy call. Tests compare it with GGUFReader.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import (GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGMLQuantizationType,
                  GGUFValueType)

# GGUFValueType -> struct format, keyed by int: the type ids read from a file look it up
SCALARS: dict[int, str] = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
NUMPY = {kind: np.dtype(fmt) for kind, fmt in SCALARS.items()}
MAX_DIMS = 4                  # ggml's GGML_MAX_DIMS
MAX_NESTING = 8               # arrays of arrays: deeper is no file's (and no stack's) business
MAX_ELEMENTS = 2**62          # a tensor's elements (ggml counts them in int64)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type: int                 # ggml type id
    ne: tuple[int, ...]       # ggml order, innermost first
    offset: int               # absolute byte offset in the file
    n_bytes: int


class GGUFFormatError(ValueError):
    pass


class Header:
    """metadata: {key: value} (arrays as lists); value_types: {key: (GGUF value type,
    item type of an array or None)};
    tensors: [TensorInfo]; data: the whole file as a read-only memory map."""

    def __init__(self, path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            try:
                self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:
                raise GGUFFormatError(f"{self.path} is empty, not a GGUF file.") from None
        self._pos = 0
        try:
            self._parse()
        except (struct.error, IndexError, UnicodeDecodeError, ValueError) as error:
            if isinstance(error, GGUFFormatError):
                raise
            raise GGUFFormatError(f"{self.path} is truncated or corrupt: its header cannot be "
                                  f"read ({error}).") from None

    def _read(self, fmt: str):
        value = struct.unpack_from(fmt, self.map, self._pos)[0]
        self._pos += struct.calcsize(fmt)
        return value

    def _string(self) -> str:
        n = self._read("<Q")
        end = self._pos + n
        if end > len(self.map):
            raise IndexError("string runs past the end of the file")
        text = self.map[self._pos:end].decode("utf-8")
        self._pos = end
        return text

    def _value(self, kind: int, depth: int = 0):
        if kind == GGUFValueType.STRING:
            return self._string()
        if kind == GGUFValueType.ARRAY:
            if depth >= MAX_NESTING:
                raise GGUFFormatError(f"{self.path} nests arrays more than {MAX_NESTING} deep.")
            item, count = self._read("<I"), self._read("<Q")
            if item == GGUFValueType.STRING:
                return [self._string() for _ in range(count)]
            if item in NUMPY:
                dtype = NUMPY[item]
                end = self._pos + count * dtype.itemsize
                if end > len(self.map):
                    raise IndexError("array runs past the end of the file")
                array = np.frombuffer(self.map, dtype=dtype, count=count, offset=self._pos)
                self._pos = end
                return array.tolist()
            return [self._value(item, depth + 1) for _ in range(count)]
        if kind not in SCALARS:
            raise GGUFFormatError(f"{self.path} has a value of unknown type {kind}.")
        return self._read(SCALARS[kind])

    def _parse(self) -> None:
        magic = self._read("<I")
        if magic != GGUF_MAGIC:
            raise GGUFFormatError(f"{self.path} is not a GGUF file (it starts with "
                                  f"{bytes(self.map[:4])!r}, not b'GGUF').")
        version = self._read("<I")
        if version not in (2, 3):
            raise GGUFFormatError(f"{self.path} is GGUF version {version}; only 2 and 3 are "
                                  "read (a big-endian file shows a huge version).")
        n_tensors, n_kv = self._read("<Q"), self._read("<Q")
        self.metadata, self.value_types = {}, {}
        for _ in range(n_kv):
            key = self._string()
            kind = self._read("<I")
            item = struct.unpack_from("<I", self.map, self._pos)[0] \
                if kind == GGUFValueType.ARRAY else None
            self.value_types[key] = (kind, item)      # to write the value back as it was
            self.metadata[key] = self._value(kind)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._read("<I")
            if not 1 <= n_dims <= MAX_DIMS:
                raise GGUFFormatError(f"{self.path}: tensor {name} has {n_dims} dimensions; "
                                      f"ggml's tensors have 1 to {MAX_DIMS}.")
            ne = tuple(self._read("<Q") for _ in range(n_dims))
            infos.append((name, self._read("<I"), ne, self._read("<Q")))
        alignment = self._alignment()
        start = -(-self._pos // alignment) * alignment
        self.tensors = [self._tensor(*info, start, alignment) for info in infos]
        self._check_apart()

    def _alignment(self) -> int:
        """general.alignment: a power of two (llama.cpp's rule), 32 where the file says none."""
        alignment = self.metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        if type(alignment) is not int or alignment < 1 or alignment & (alignment - 1):
            raise GGUFFormatError(f"{self.path}: general.alignment is {repr(alignment)[:40]}, "
                                  "not a power of two; the file is malformed.")
        return alignment

    def _tensor(self, name: str, ggml_type: int, ne: tuple, offset: int, start: int,
                alignment: int) -> TensorInfo:
        """One tensor's description, checked: a known type, whole blocks, aligned, inside
        the file."""
        if ggml_type not in GGML_QUANT_SIZES:
            raise GGUFFormatError(f"{self.path}: tensor {name} has unknown type {ggml_type}.")
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
        count = math.prod(ne)
        if max(ne) > MAX_ELEMENTS or count > MAX_ELEMENTS:
            raise GGUFFormatError(f"{self.path}: tensor {name} has shape {ne}, larger than "
                                  "ggml can describe; the file is malformed.")
        if ne[0] % block:
            raise GGUFFormatError(f"{self.path}: tensor {name} has rows of {ne[0]} values, not "
                                  f"a whole number of its type's blocks of {block}.")
        if offset % alignment:
            raise GGUFFormatError(f"{self.path}: tensor {name} starts at offset {offset}, "
                                  f"not a multiple of the file's alignment ({alignment}).")
        n_bytes = count // block * size
        if start + offset + n_bytes > len(self.map):
            raise GGUFFormatError(f"{self.path} is truncated: tensor {name} ends at byte "
                                  f"{start + offset + n_bytes} of {len(self.map)}.")
        return TensorInfo(name, ggml_type, ne, start + offset, n_bytes)

    def _check_apart(self) -> None:
        """No tensor twice, and no two tensors' data overlapping (nor sharing an offset)."""
        seen: set[str] = set()
        for info in self.tensors:
            if info.name in seen:
                raise GGUFFormatError(f"{self.path} holds the tensor {info.name} twice.")
            seen.add(info.name)
        placed = sorted((t for t in self.tensors if t.n_bytes), key=lambda t: t.offset)
        for before, after in zip(placed, placed[1:]):
            if after.offset < before.offset + before.n_bytes:
                raise GGUFFormatError(f"{self.path}: the data of tensors {before.name} and "
                                      f"{after.name} overlap (offsets {before.offset} and "
                                      f"{after.offset}); the file is malformed.")
