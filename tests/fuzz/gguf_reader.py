"""Fuzz target: bytes as a GGUF model file, through the header reader (pyggml.gguf_reader)
and the text model's metadata checks and binding (runner.loading.loader.bind_text_model),
which is what a file given to /api/create or the runner reaches before any memory or ggml op.

The documented refusal of a bad file is a ValueError whose message is a sentence
(GGUFFormatError for the header, ModelError naming a metadata key, the registry's for an
architecture this runner does not know); anything else is a finding."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyggml
from runner.loading.loader import bind_text_model

# one file per fuzzing process, rewritten for each input (the reader maps a file)
FILE = Path(tempfile.mkdtemp(prefix="fuzz-gguf-",
                             dir="/dev/shm" if os.path.isdir("/dev/shm") else None)) / "in.gguf"


def one_input(data: bytes) -> None:
    FILE.write_bytes(data)
    try:
        with pyggml.GGUFFile(FILE) as gguf_file:
            bind_text_model(gguf_file)
    except ValueError as error:
        message = str(error)
        if not message.endswith("."):
            raise AssertionError(f"a refusal that is no sentence: {message!r}") from error
