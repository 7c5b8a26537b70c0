"""A Hugging Face checkpoint directory: config, generation config, tensors, tokenizer files.

Tensors are read from safetensors files (one, or shards listed by
model.safetensors.index.json) by memory map. The format is a JSON header and raw little-endian
data; we read it directly because numpy has no bfloat16, which the safetensors package's
numpy loader therefore refuses, and most checkpoints are stored in it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, overload

import numpy as np

NUMPY_TYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
               "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
               "BOOL": np.bool_}


class CheckpointError(ValueError):
    """The directory does not hold a checkpoint we can convert."""


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
                raise CheckpointError(f"{self.dir} has no {name}.")
            return None
        return json.loads(path.read_text(encoding="utf-8"))

    def eos_ids(self) -> list[int]:
        """generation_config.json's eos_token_id (possibly a list) wins over config.json's."""
        eos = self.generation.get("eos_token_id", self.config.get("eos_token_id"))
        return [] if eos is None else eos if isinstance(eos, list) else [eos]

    def _index(self) -> dict[str, TensorEntry]:
        index = self.dir / "model.safetensors.index.json"
        if index.exists():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        elif (self.dir / "model.safetensors").exists():
            files = ["model.safetensors"]
        else:
            raise CheckpointError(f"{self.dir} has no model.safetensors (nor a sharded index).")
        tensors = {}
        for file in files:
            path = self.dir / file
            if not path.exists():
                raise CheckpointError(f"The shard {file} listed by the index is missing.")
            tensors.update(_read_header(path))
        return tensors


def _read_header(path: Path) -> dict[str, TensorEntry]:
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    data = np.memmap(path, dtype=np.uint8, mode="r")
    base = 8 + size
    entries = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype, shape = info["dtype"], tuple(info["shape"])
        if dtype != "BF16" and dtype not in NUMPY_TYPES:
            raise CheckpointError(f"The tensor {name} in {path.name} has type {dtype}, which "
                                  "this converter does not read.")

        def load(begin=begin, end=end, dtype=dtype, shape=shape):
            raw = data[base + begin:base + end]
            if dtype == "BF16":           # the top half of a float32
                return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32) \
                    .reshape(shape)
            array = raw.view(NUMPY_TYPES[dtype]).reshape(shape)
            return array.astype(np.float32) if array.dtype.kind == "f" else array

        entries[name] = TensorEntry(name, shape, load)
    return entries
