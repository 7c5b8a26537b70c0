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

Names are imported on first use: reading a GGUF file's header (pyggml.gguf_reader) does not
load the ggml library, so a process that only reads files (the Ollama/OpenAI server) never
does. The library logs the system's backends and devices once, when it is first loaded.
"""

from importlib import import_module as _import_module
from importlib.util import find_spec as _find_spec

if _find_spec(__name__ + "._ggml") is None:  # the checkout itself, shadowing the install
    raise ImportError(
        f"pyggml's compiled extension is not in {__path__[0]}: Python imported the source "
        "tree because it is the current directory. Run from another directory, or install "
        "the checkout with `pip install -e .` so that it works in place.")

# name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(["Backend", "Device", "backend_features", "cpu_backend", "cpu_device",
                     "device", "devices", "log_system_info", "system_info"], "backend"),
    **dict.fromkeys(["Buffer", "BufferType", "allocate"], "memory"),
    "Context": "context",
    **dict.fromkeys(["BF16", "F16", "F32", "I32", "I64", "GGMLType"], "dtypes"),
    "GGMLError": "errors",
    "GGUFFile": "gguf_weights",
    **dict.fromkeys(["Computation", "Graph", "Scheduler"], "graph"),
    "dequantize": "numpy_interop",
    "walsh_hadamard": "ops",
    "quantize": "quants",
    "Tensor": "tensor",
}

__all__ = sorted(_EXPORTS) + ["rpc"]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(_import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    try:                                   # a submodule reached as an attribute: pyggml.rpc
        return _import_module(f".{name}", __name__)
    except ModuleNotFoundError as missing:
        if missing.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
