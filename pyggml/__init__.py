"""pyggml: a thin cffi binding over ggml.

    import pyggml, numpy as np
    with pyggml.Context() as ctx, pyggml.Scheduler() as sched:
        a = ctx.new_tensor("F32", (3, 4)).set_input()
        b = ctx.new_tensor("F32", (2, 4)).set_input()
        y = a.mul_mat(b)                  # (2, 3) == b @ a.T
        sched.compute(ctx.graph(y), {a: np.ones((3, 4), np.float32),
                                     b: np.ones((2, 4), np.float32)})
        print(y.numpy())

Shapes are numpy's (outermost first) everywhere; see pyggml.tensor for the convention.
"""

from importlib.util import find_spec as _find_spec

if _find_spec(__name__ + "._ggml") is None:  # the checkout itself, shadowing the install
    raise ImportError(
        f"pyggml's compiled extension is not in {__path__[0]}: Python imported the source "
        "tree because it is the current directory. Run from another directory, or install "
        "the checkout with `pip install -e .` so that it works in place.")

from . import log as _log
from . import rpc
from .backend import (Backend, Buffer, BufferType, Device, allocate, backend_features,
                      cpu_backend, cpu_device, device, devices, log_system_info,
                      system_info)
from .context import Context
from .dtypes import BF16, F16, F32, I32, I64, GGMLType
from .errors import GGMLError
from .gguf_weights import GGUFFile
from .graph import Computation, Graph, Scheduler
from .numpy_interop import dequantize
from .ops import walsh_hadamard
from .quants import quantize
from .tensor import Tensor

__all__ = [
    "Backend", "Buffer", "BufferType", "Computation", "Context", "Device", "GGMLError",
    "GGMLType", "GGUFFile", "Graph", "Scheduler", "Tensor", "BF16", "F16", "F32", "I32", "I64",
    "allocate", "backend_features", "cpu_backend", "cpu_device", "dequantize", "device", "devices",
    "log_system_info", "quantize", "rpc", "system_info", "walsh_hadamard",
]

_log.install()
log_system_info()
