"""ggml's own log lines go to the `pyggml.ggml` logger instead of stderr."""

from __future__ import annotations

import logging

from ._ggml import ffi, lib

log = logging.getLogger("pyggml.ggml")

LEVELS = {
    lib.GGML_LOG_LEVEL_DEBUG: logging.DEBUG,
    lib.GGML_LOG_LEVEL_INFO: logging.INFO,
    lib.GGML_LOG_LEVEL_WARN: logging.WARNING,
    lib.GGML_LOG_LEVEL_ERROR: logging.ERROR,
}
_last_level = [logging.INFO]


@ffi.def_extern()
def pyggml_on_log(level, text, user):
    message = ffi.string(text).decode(errors="replace").rstrip("\n")
    if level == lib.GGML_LOG_LEVEL_CONT:       # continues the previous line
        level_value = _last_level[0]
    else:
        level_value = LEVELS.get(level, logging.INFO)
        _last_level[0] = level_value
    if message:
        log.log(level_value, message)


def install() -> None:
    lib.ggml_log_set(lib.pyggml_on_log, ffi.NULL)
