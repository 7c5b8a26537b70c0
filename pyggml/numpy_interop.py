"""numpy interop: copies in with an exact shape and dtype check, views or copies out.

ggml's ne/nb are reversed into numpy's shape/strides (see tensor.py). Host memory is viewed
without copying; the view keeps its Tensor (and so the context and buffers) alive. Arrays
that view a buffer are invalid once that buffer or scheduler is closed explicitly.
"""

from __future__ import annotations

import numpy as np

from ._lib import ffi, lib
from .dtypes import NUMPY_DTYPE
from .errors import GGMLError
from .shape import describe


def _require_memory(tensor) -> None:
    ptr = tensor.ptr
    source = ptr.view_src
    if (ptr.buffer == ffi.NULL and source != ffi.NULL and source.buffer != ffi.NULL
            and source.data != ffi.NULL):
        lib.ggml_backend_view_init(ptr)   # a view made after its source got memory
    if ptr.buffer == ffi.NULL or ptr.data == ffi.NULL:
        raise GGMLError(f"The tensor {describe(tensor)} has no memory yet: allocate its context "
                        "on a backend, or let a scheduler allocate a graph that uses it, first "
                        "(a scheduler gives memory only to tensors its graph needs).")


def expected_array(tensor) -> tuple[tuple[int, ...], np.dtype]:
    """The numpy shape and dtype that hold this tensor's data exactly (raw bytes per row
    for quantized types)."""
    dtype = tensor.dtype
    if dtype in NUMPY_DTYPE:
        return tensor.shape, NUMPY_DTYPE[dtype]
    shape = tensor.shape
    return shape[:-1] + (dtype.row_size(shape[-1]),), np.dtype(np.uint8)


def _layout(tensor) -> tuple[tuple[int, ...], np.dtype, bool]:
    """(shape, dtype, contiguous) of the arrays tensor takes: fixed for a tensor's life, so
    worked out once (inputs are set every decode step)."""
    layout = tensor._array_layout
    if layout is None:
        layout = tensor._array_layout = (*expected_array(tensor), tensor.is_contiguous)
    return layout


def copy_in(tensor, array) -> None:
    if not isinstance(array, np.ndarray):
        raise TypeError(f"Expected a numpy array for {describe(tensor)}, got "
                        f"{type(array).__name__}.")
    shape, dtype, contiguous = _layout(tensor)
    if array.shape != shape or array.dtype != dtype:
        raise ValueError(f"Cannot copy an array of shape {array.shape} and dtype {array.dtype} "
                         f"into {describe(tensor)}: expected shape {shape} and dtype {dtype}.")
    if not contiguous:
        raise ValueError(f"Cannot copy into the non-contiguous tensor {describe(tensor)}; "
                         "copy into the tensor it views.")
    _require_memory(tensor)
    ptr, context = tensor.ptr, tensor.context
    limit = context.index_limits.get(ptr)
    if limit is not None and not in_range(array, limit[0]):
        bad = array[(array < 0) | (array >= limit[0])].flat[0]
        raise ValueError(f"{describe(tensor)} holds {limit[1]}, which must lie in "
                         f"[0, {limit[0]}), but it was given {bad}.")
    context.unfilled.pop(ptr, None)
    if context.staged is not None:              # a compute reads this memory now: for later
        context.staged.append((tensor, np.array(array, order="C")))   # a copy: it is the
        return                                                        # caller's to change
    array = np.ascontiguousarray(array)
    lib.ggml_backend_tensor_set(ptr, ffi.from_buffer(array), 0, array.nbytes)


def in_range(ids: np.ndarray, limit: int) -> bool:
    """Whether every id (a signed integer array) lies in [0, limit): a few (a decode step's)
    in Python, which is quicker than a numpy reduction (several times so when a compute has
    just evicted numpy's code from the caches); more in one reduction over them as unsigned
    (a negative id becomes a huge one)."""
    if ids.size <= 16:
        return all(0 <= i < limit for i in ids.ravel().tolist())
    return int(ids.view(_UNSIGNED[ids.dtype.itemsize]).max()) < limit


_UNSIGNED = {4: np.uint32, 8: np.uint64}


class _HostView:
    """Owner of host memory seen by numpy without a copy: keeps owner (a tensor, or a
    buffer) alive while the array lives."""

    def __init__(self, owner, address, shape, dtype: np.dtype, strides=None):
        self.owner = owner
        self.__array_interface__ = {"version": 3, "shape": shape, "strides": strides,
                                    "typestr": dtype.str,
                                    "data": (int(ffi.cast("uintptr_t", address)), False)}


def to_numpy(tensor, copy: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    _require_memory(tensor)
    ggml_type = tensor.dtype
    if out is not None:
        return _read_into(tensor, out)
    if ggml_type.is_quantized:
        return _dequantized(tensor)
    if ggml_type not in NUMPY_DTYPE:
        return _dequantized(tensor)   # BF16: converted through ggml's own to_float
    dtype = NUMPY_DTYPE[ggml_type]
    shape, strides = tensor.shape, tensor.strides
    buffer = tensor.ptr.buffer
    # a scheduler's compute memory is reused by the next graph and freed with the
    # scheduler: a view of it would change or dangle, so it is always copied
    compute = lib.ggml_backend_buffer_get_usage(buffer) == lib.GGML_BACKEND_BUFFER_USAGE_COMPUTE
    if lib.ggml_backend_buffer_is_host(buffer):
        view = np.asarray(_HostView(tensor, tensor.ptr.data, shape, dtype, strides))
        return view.copy() if copy or compute else view
    raw = np.empty(tensor.nbytes, dtype=np.uint8)
    lib.ggml_backend_tensor_get(tensor.ptr, ffi.from_buffer(raw), 0, raw.nbytes)
    return np.lib.stride_tricks.as_strided(raw.view(dtype), shape, strides).copy()


def borrowed(tensor) -> np.ndarray | None:
    """A view of tensor without a copy, compute memory included (valid only until its
    scheduler computes or allocates again), or None where the tensor is not plain numbers
    in host memory."""
    data = tensor.ptr.data
    kept = tensor._borrowed          # the view made last, while the memory has not moved
    if kept is not None and kept[0] == data:
        return kept[1]
    _require_memory(tensor)
    dtype = NUMPY_DTYPE.get(tensor.dtype)
    if dtype is None or not lib.ggml_backend_buffer_is_host(tensor.ptr.buffer):
        return None
    view = np.asarray(_HostView(tensor, tensor.ptr.data, tensor.shape, dtype, tensor.strides))
    tensor._borrowed = (tensor.ptr.data, view)
    return view


def host_array(tensor, shape) -> np.ndarray:
    """An uninitialized array of tensor's dtype and the given shape, in the host memory that
    tensor's device copies to fastest (CUDA's pinned memory), or ordinary memory where the
    tensor lives in host memory or its device has none: for repeated numpy(out=...)."""
    dtype = np.dtype(NUMPY_DTYPE[tensor.dtype])
    shape = tuple(shape)
    buffer = tensor.ptr.buffer
    if buffer == ffi.NULL or lib.ggml_backend_buffer_is_host(buffer):
        return np.empty(shape, dtype)
    device = lib.ggml_backend_buft_get_device(lib.ggml_backend_buffer_get_type(buffer))
    pinned = ffi.NULL if device == ffi.NULL else lib.ggml_backend_dev_host_buffer_type(device)
    nbytes = max(1, int(np.prod(shape)) * dtype.itemsize)
    raw = ffi.NULL if pinned == ffi.NULL else lib.ggml_backend_buft_alloc_buffer(pinned, nbytes)
    if raw == ffi.NULL:
        return np.empty(shape, dtype)
    buffer = ffi.gc(raw, lib.ggml_backend_buffer_free)         # freed with the array
    return np.asarray(_HostView(buffer, lib.ggml_backend_buffer_get_base(raw), shape, dtype))


def _read_into(tensor, out: np.ndarray) -> np.ndarray:
    """Copy a contiguous tensor into out, an array of its exact shape and dtype (reused
    across reads: no allocation, one copy from any device)."""
    expected = (tensor.shape, NUMPY_DTYPE.get(tensor.dtype))
    if (out.shape, out.dtype) != expected or not out.flags.c_contiguous or \
            not out.flags.writeable or not tensor.is_contiguous:
        raise ValueError(f"Cannot read {describe(tensor)} into an array of shape {out.shape} "
                         f"and dtype {out.dtype}: it takes a contiguous, writable array of "
                         f"shape {expected[0]} and dtype {expected[1]}.")
    lib.ggml_backend_tensor_get(tensor.ptr, ffi.from_buffer(out), 0, out.nbytes)
    return out


def _dequantized(tensor) -> np.ndarray:
    if not tensor.is_contiguous:
        raise ValueError(f"Only contiguous {tensor.dtype.name} tensors can be read back; "
                         f"{describe(tensor)} is a strided view (cont() it first).")
    raw = np.empty(tensor.nbytes, dtype=np.uint8)
    lib.ggml_backend_tensor_get(tensor.ptr, ffi.from_buffer(raw), 0, raw.nbytes)
    return dequantize(raw, tensor.dtype, tensor.shape)


def dequantize(raw: np.ndarray, ggml_type, shape) -> np.ndarray:
    """float32 values of shape from raw bytes of ggml_type, through ggml's own to_float."""
    count = int(np.prod(shape))
    if raw.nbytes != ggml_type.row_size(count):
        raise ValueError(f"{raw.nbytes} bytes cannot hold {count} {ggml_type.name} values "
                         f"({ggml_type.row_size(count)} bytes needed).")
    traits = lib.ggml_get_type_traits(ggml_type)
    if traits.to_float == ffi.NULL:
        raise ValueError(f"ggml cannot convert {ggml_type.name} to float.")
    out = np.empty(count, dtype=np.float32)
    raw = np.ascontiguousarray(raw)
    traits.to_float(ffi.from_buffer(raw), ffi.cast("float *", ffi.from_buffer(out)), count)
    return out.reshape(shape)


