"""Quantization through ggml (ggml_quantize_chunk), for making models later.

Block sizes per type come from ggml's own type traits (GGMLType.block_size, .type_size).
"""

from __future__ import annotations

import numpy as np

from ._lib import ffi, lib
from .dtypes import GGMLType
from .numpy_interop import dequantize

__all__ = ["quantize", "dequantize", "requires_imatrix"]


def requires_imatrix(ggml_type) -> bool:
    return bool(lib.ggml_quantize_requires_imatrix(GGMLType.parse(ggml_type)))


def quantize(values: np.ndarray, ggml_type, imatrix: np.ndarray | None = None) -> np.ndarray:
    """Quantize float32 rows (..., n) to raw bytes (..., row_size(n)) of ggml_type.

    n must be a multiple of the type's block size. imatrix (n,) weighs each column's error;
    types that cannot work without one (the IQ1/IQ2 family) raise without it.
    """
    ggml_type = GGMLType.parse(ggml_type)
    values = np.ascontiguousarray(values, dtype=np.float32)
    if values.ndim < 1 or values.size == 0:
        raise ValueError(f"quantize needs a non-empty array of rows, not shape {values.shape}.")
    n_per_row = values.shape[-1]
    row_bytes = ggml_type.row_size(n_per_row)
    if imatrix is None and requires_imatrix(ggml_type):
        raise ValueError(f"{ggml_type.name} quantization needs an importance matrix.")
    if imatrix is not None:
        imatrix = np.ascontiguousarray(imatrix, dtype=np.float32)
        if imatrix.shape != (n_per_row,):
            raise ValueError(f"The importance matrix must have shape ({n_per_row},), not "
                             f"{imatrix.shape}.")
    rows = values.size // n_per_row
    out = np.empty(values.shape[:-1] + (row_bytes,), dtype=np.uint8)
    written = lib.ggml_quantize_chunk(
        ggml_type, ffi.cast("float *", ffi.from_buffer(values)), ffi.from_buffer(out), 0, rows,
        n_per_row, ffi.NULL if imatrix is None else ffi.cast("float *", ffi.from_buffer(imatrix)))
    assert written == out.nbytes, (written, out.nbytes)
    return out
