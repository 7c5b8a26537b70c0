"""A model with a real file's metadata, vocabulary, tensor shapes and types, and random
weights: for measuring where the real file cannot go (the lent GPU machine
takes no downloads and little luggage). Speed does not depend on the weights' values.

    python bench/twin.py skeleton REAL.gguf SKELETON.json.gz   # metadata and tensor list
    python bench/twin.py make SKELETON.json.gz TWIN.gguf [--seed 0]

Matrices are N(0, 0.02) quantized to the real tensor's type through ggml; 1-D tensors
(norms, biases) are 1 + N(0, 0.02), so that activations keep a sane scale.
"""

from __future__ import annotations

import argparse
import gzip
import json

import gguf
import numpy as np

import pyggml
from pyggml.gguf_reader import Header

SKIPPED = ("general.architecture", "general.alignment")


def skeleton(source, target) -> None:
    header = Header(source)
    found = {"metadata": [[key, value, *header.value_types[key]]
                          for key, value in header.metadata.items()
                          if key not in SKIPPED and not key.startswith("GGUF.")],
             "architecture": header.metadata["general.architecture"],
             "tensors": [[t.name, list(reversed(t.ne)), pyggml.dtypes.type_name(t.type).upper()]
                         for t in header.tensors]}
    with gzip.open(target, "wt") as f:
        json.dump(found, f)


def random_values(rng, shape) -> np.ndarray:
    values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
    return values + np.float32(1) if len(shape) == 1 else values


def encoded(values: np.ndarray, kind: str) -> np.ndarray:
    casts = {"F32": np.float32, "F16": np.float16}
    if kind in casts:
        return values.astype(casts[kind])
    return pyggml.quants.quantize(values, kind)


def make(source, target, seed: int) -> None:
    with gzip.open(source, "rt") as f:
        found = json.load(f)
    writer = gguf.GGUFWriter(str(target), found["architecture"])
    for key, value, kind, item in found["metadata"]:
        writer.add_key_value(key, value, gguf.GGUFValueType(kind),
                             sub_type=None if item is None else gguf.GGUFValueType(item))
    for name, shape, kind in found["tensors"]:
        ggml_type = pyggml.GGMLType[kind]
        nbytes = ggml_type.row_size(shape[-1]) * int(np.prod(shape[:-1]))
        writer.add_tensor_info(name, shape, np.dtype(np.float32), nbytes,
                               raw_dtype=gguf.GGMLQuantizationType(int(ggml_type)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for _, shape, kind in found["tensors"]:
        writer.write_tensor_data(encoded(random_values(rng, tuple(shape)), kind))
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    first = verbs.add_parser("skeleton", help="a real GGUF's metadata and tensor list")
    first.add_argument("source")
    first.add_argument("target")
    second = verbs.add_parser("make", help="a GGUF of random weights from a skeleton")
    second.add_argument("source")
    second.add_argument("target")
    second.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.verb == "skeleton":
        skeleton(args.source, args.target)
    else:
        make(args.source, args.target, args.seed)


if __name__ == "__main__":
    main()
