"""Writing a GGUF file from a plan of tensors: each one's type from the output type (1-D
tensors and a few named ones stay F32), streamed to the file one at a time."""

from __future__ import annotations

import gguf
import numpy as np
from tqdm import tqdm

import pyggml

from .checkpoint import CheckpointError

OUTTYPES = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
            "bf16": gguf.GGMLQuantizationType.BF16, "q8_0": gguf.GGMLQuantizationType.Q8_0}
FILE_TYPES = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
              "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}


def check_outtype(outtype: str) -> None:
    if outtype not in OUTTYPES:
        raise ValueError(f"Unknown output type {outtype!r}; choose one of "
                         f"{', '.join(OUTTYPES)}.")


def write_tensors(writer: gguf.GGUFWriter, plan: dict, outtype: str, keep_f32=(),
                  implied=None, progress: bool = True) -> None:
    """plan: GGUF name -> (shape, loader of float32 data), in file order, or (shape, loader
    of encoded bytes, their ggml type) for data that passes through (MXFP4 experts).
    keep_f32: name endings that stay F32 whatever outtype says; implied(name): the shape the
    config implies, or None. Writes the header, the metadata already added, and the tensors;
    closes."""
    encoded = {}
    for name, (shape, _, *raw) in plan.items():   # shapes only: the data is read once
        expected = implied(name) if implied else None
        if expected is not None and tuple(shape) != tuple(expected):
            raise CheckpointError(f"The tensor {name} has shape {shape}, but config.json "
                                  f"implies {expected}.")
        kind = OUTTYPES[outtype] if len(shape) > 1 and not name.endswith(tuple(keep_f32)) \
            else gguf.GGMLQuantizationType.F32
        kind = raw[0] if raw else kind
        if kind == gguf.GGMLQuantizationType.Q8_0 and shape[-1] % 32:
            kind = gguf.GGMLQuantizationType.F16       # rows no Q8_0 block divides
        nbytes = pyggml.GGMLType(int(kind)).row_size(shape[-1]) * int(np.prod(shape[:-1]))
        writer.add_tensor_info(name, shape, np.dtype(np.float32), nbytes, raw_dtype=kind)
        encoded[name] = kind
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, (_, load, *raw) in tqdm(plan.items(), desc="converting", unit="tensor",
                                      disable=not progress):
        data = load()
        writer.write_tensor_data(np.ascontiguousarray(data) if raw else
                                 _encode(data, encoded[name]))
    writer.close()


def _encode(data: np.ndarray, kind) -> np.ndarray:
    data = np.ascontiguousarray(data, dtype=np.float32)
    if kind == gguf.GGMLQuantizationType.F32:
        return data
    if kind == gguf.GGMLQuantizationType.F16:
        return data.astype(np.float16)
    if kind == gguf.GGMLQuantizationType.BF16:
        bits = data.view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)   # round even
    return pyggml.quants.quantize(data, int(kind))
