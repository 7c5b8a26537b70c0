"""The compiled binding (cffi's `ffi` and ggml's `lib`), loaded on first import. Before any
other call: ggml's log lines go to Python's logging, and a failed ggml assertion in a
guarded call becomes an error instead of an abort (errors.py reads it)."""

from ._ggml import ffi, lib
from .log import install

install()
lib.pyggml_install_abort_hook()

__all__ = ["ffi", "lib"]
