"""A Hugging Face checkpoint directory: config, generation config, tensors, tokenizer files.

Tensors are read from safetensors files (one, or shards listed by
model.safetensors.index.json) by memory map. The format is a JSON header and raw little-endian
data; we read it directly because numpy has no bfloat16, which the safetensors package's
numpy loader therefore refuses, and most checkpoints are stored in it.
"""

from __future__ import annotations

import contextlib
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, overload

import numpy as np

NUMPY_TYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
               "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
               "BOOL": np.bool_}
ITEM_SIZES = {"BF16": 2, **{name: np.dtype(kind).itemsize for name, kind in NUMPY_TYPES.items()}}
LONGEST_HEADER = 100_000_000        # bytes of a safetensors header, the safetensors library's


class CheckpointError(ValueError):
    """The directory does not hold a checkpoint we can convert."""


# what reading a malformed file raises where the converter has no sentence of its own
MALFORMED = (TypeError, AttributeError, IndexError, ValueError, OverflowError,
             ZeroDivisionError, struct.error)


@contextlib.contextmanager
def reading(what: str):
    """Errors of a malformed file met while reading from it (a key it lacks, a value of the
    wrong kind) as one CheckpointError naming the file, what: "config.json"."""
    try:
        yield
    except CheckpointError:
        raise
    except KeyError as missing:
        raise CheckpointError(f"{what} lacks the key {missing}.") from None
    except MALFORMED as error:
        raise CheckpointError(f"{what} holds a value of the wrong kind or size "
                              f"({type(error).__name__}: {error}).") from None


@dataclass
class TensorEntry:
    name: str
    shape: tuple[int, ...]
    load: Callable[[], np.ndarray]       # float32 for floating types, else as stored


class Checkpoint:
    def __init__(self, directory) -> None:
        self.dir = Path(directory)
        if not self.dir.is_dir():
            raise CheckpointError(f"{self.dir} is not a directory.")
        self.config = self._json("config.json", required=True)
        self.generation = self._json("generation_config.json") or {}
        self.tokenizer_config = self._json("tokenizer_config.json") or {}
        self.tensors = self._index()
        self.tokenizer_post_processor: dict | None = None

    @overload
    def _json(self, name: str, required: Literal[True]) -> dict: ...

    @overload
    def _json(self, name: str, required: bool = False) -> dict | None: ...

    def _json(self, name: str, required: bool = False) -> dict | None:
        path = self.dir / name
        if not path.exists():
            if required:
                raise CheckpointError(f"The checkpoint has no {name}.")
            return None
        return read_json(path)

    def eos_ids(self) -> list[int]:
        """generation_config.json's eos_token_id (possibly a list) wins over config.json's."""
        eos = self.generation.get("eos_token_id", self.config.get("eos_token_id"))
        return [] if eos is None else eos if isinstance(eos, list) else [eos]

    def _index(self) -> dict[str, TensorEntry]:
        index = self.dir / "model.safetensors.index.json"
        if index.exists():
            files = _shards(read_json(index))
        elif (self.dir / "model.safetensors").exists():
            files = ["model.safetensors"]
        else:
            raise CheckpointError("The checkpoint has no model.safetensors (nor a sharded "
                                  "index).")
        tensors = {}
        for file in files:
            path = self.dir / file
            if not path.exists():
                raise CheckpointError(f"The shard {file} listed by the index is missing.")
            tensors.update(_read_header(path))
        return tensors


def read_json(path: Path) -> dict:
    """A JSON object from a checkpoint's file, or a CheckpointError naming the file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"The checkpoint has no {path.parent.name}/{path.name}.") from None
    return json_object(data, path.name)


def json_object(data: bytes, what: str) -> dict:
    """data, what's JSON, as an object, else a CheckpointError naming what."""
    found = json_value(data, what)
    if not isinstance(found, dict):
        raise CheckpointError(f"{what} is not a JSON object (it holds a "
                              f"{type(found).__name__}).")
    return found


def json_value(data: bytes, what: str):
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{what} is not JSON ({error}).") from None
    except RecursionError:
        raise CheckpointError(f"{what} nests its JSON too deeply to be read.") from None


def _shards(index: dict) -> list[str]:
    """The files model.safetensors.index.json lists, each a file beside it."""
    weights = index.get("weight_map")
    if not isinstance(weights, dict) or not all(isinstance(f, str) for f in weights.values()):
        raise CheckpointError("model.safetensors.index.json has no weight_map of tensor names "
                              "to file names.")
    for file in weights.values():
        if Path(file).name != file or file.startswith("."):
            raise CheckpointError(f"model.safetensors.index.json lists the shard {file!r}, "
                                  "which is not a file name in the checkpoint's folder.")
    return sorted(set(weights.values()))


def _read_header(path: Path) -> dict[str, TensorEntry]:
    """The tensors a safetensors file's header lists, each checked against the file: a
    header that lies about its size or its tensors' places is refused before any is read."""
    length = path.stat().st_size
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        if length < 8:
            raise CheckpointError(f"{path.name} is not a safetensors file: it holds {length} "
                                  "bytes.")
        if size > min(LONGEST_HEADER, length - 8):
            raise CheckpointError(f"{path.name} is not a safetensors file: its header claims "
                                  f"{size} bytes, of at most {LONGEST_HEADER}, and the file "
                                  f"holds {length - 8} after that claim.")
        header = json_object(f.read(size), f"{path.name}'s safetensors header")
    data = np.memmap(path, dtype=np.uint8, mode="r") if length > 8 + size else \
        np.zeros(0, np.uint8)
    base = 8 + size
    entries = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (begin, end) = _placed(name, info, path.name, length - base)

        def load(begin=begin, end=end, dtype=dtype, shape=shape):
            raw = data[base + begin:base + end]
            if dtype == "BF16":           # the top half of a float32
                return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32) \
                    .reshape(shape)
            array = raw.view(NUMPY_TYPES[dtype]).reshape(shape)
            return array.astype(np.float32) if array.dtype.kind == "f" else array

        entries[name] = TensorEntry(name, shape, load)
    return entries


def _placed(name: str, info, file: str, data_size: int
            ) -> tuple[str, tuple[int, ...], tuple[int, int]]:
    """A header entry's type, shape and byte range, each checked: a known type, whole
    non-negative dimensions, and a range inside the file that holds exactly that shape."""
    if not isinstance(info, dict):
        raise CheckpointError(f"The tensor {name} in {file} is described by a "
                              f"{type(info).__name__}, not an object.")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in ITEM_SIZES:
        raise CheckpointError(f"The tensor {name} in {file} has type {dtype}, which this "
                              "converter does not read.")
    if not isinstance(shape, list) or not all(_whole(n) for n in shape):
        raise CheckpointError(f"The tensor {name} in {file} has the shape {shape!r}, not a "
                              "list of whole numbers.")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_whole, offsets)) \
            or not offsets[0] <= offsets[1] <= data_size:
        raise CheckpointError(f"The tensor {name} in {file} has the data offsets "
                              f"{offsets!r}, not a range inside the file's {data_size} bytes "
                              "of data.")
    needed = math.prod(shape) * ITEM_SIZES[dtype]
    if offsets[1] - offsets[0] != needed:
        raise CheckpointError(f"The tensor {name} in {file} has the shape {shape} of "
                              f"{needed} bytes, but its data offsets span "
                              f"{offsets[1] - offsets[0]}.")
    return dtype, tuple(shape), (offsets[0], offsets[1])


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
