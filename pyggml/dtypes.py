"""ggml's element types: names, block sizes, and the numpy dtypes they map to."""

from __future__ import annotations

import enum

import numpy as np

from ._lib import ffi, lib


class GGMLType(enum.IntEnum):
    F32 = lib.GGML_TYPE_F32
    F16 = lib.GGML_TYPE_F16
    BF16 = lib.GGML_TYPE_BF16
    F64 = lib.GGML_TYPE_F64
    I8 = lib.GGML_TYPE_I8
    I16 = lib.GGML_TYPE_I16
    I32 = lib.GGML_TYPE_I32
    I64 = lib.GGML_TYPE_I64
    Q4_0 = lib.GGML_TYPE_Q4_0
    Q4_1 = lib.GGML_TYPE_Q4_1
    Q5_0 = lib.GGML_TYPE_Q5_0
    Q5_1 = lib.GGML_TYPE_Q5_1
    Q8_0 = lib.GGML_TYPE_Q8_0
    Q2_K = lib.GGML_TYPE_Q2_K
    Q3_K = lib.GGML_TYPE_Q3_K
    Q4_K = lib.GGML_TYPE_Q4_K
    Q5_K = lib.GGML_TYPE_Q5_K
    Q6_K = lib.GGML_TYPE_Q6_K
    Q8_K = lib.GGML_TYPE_Q8_K
    IQ4_NL = lib.GGML_TYPE_IQ4_NL
    MXFP4 = lib.GGML_TYPE_MXFP4

    @property
    def block_size(self) -> int:
        """Elements per block (1 for plain types, 32 or 256 for quantized ones)."""
        return lib.ggml_blck_size(self)

    @property
    def type_size(self) -> int:
        """Bytes per block."""
        return lib.ggml_type_size(self)

    @property
    def is_quantized(self) -> bool:
        return bool(lib.ggml_is_quantized(self))

    def row_size(self, n: int) -> int:
        """Bytes taken by a row of n elements (n a multiple of block_size)."""
        if n % self.block_size:
            raise ValueError(f"A row of {self.name} holds a multiple of {self.block_size} "
                             f"elements, not {n}.")
        return lib.ggml_row_size(self, n)

    @classmethod
    def parse(cls, value: "GGMLType | str | int") -> "GGMLType":
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                raise ValueError(f"Unknown ggml type {value!r}; known types: "
                                 f"{', '.join(t.name for t in cls)}.") from None
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"Unknown ggml type {value!r}; known types: "
                             f"{', '.join(t.name for t in cls)}.") from None


F32, F16, BF16, I32, I64 = GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.I32, GGMLType.I64

NUMPY_DTYPE: dict[GGMLType, np.dtype] = {
    GGMLType.F32: np.dtype(np.float32),
    GGMLType.F16: np.dtype(np.float16),
    GGMLType.F64: np.dtype(np.float64),
    GGMLType.I8: np.dtype(np.int8),
    GGMLType.I16: np.dtype(np.int16),
    GGMLType.I32: np.dtype(np.int32),
    GGMLType.I64: np.dtype(np.int64),
}
GGML_TYPE = {dtype: ggml_type for ggml_type, dtype in NUMPY_DTYPE.items()}


def ggml_type_of(dtype) -> GGMLType:
    """The ggml type that holds numpy's dtype exactly."""
    try:
        return GGML_TYPE[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"numpy dtype {np.dtype(dtype)} has no ggml type; use one of "
                         f"{', '.join(str(d) for d in GGML_TYPE)}.") from None


def type_name(ggml_type: int) -> str:
    """ggml's name for any type id, including those GGMLType does not list."""
    return ffi.string(lib.ggml_type_name(ggml_type)).decode()
