"""Hostile checkpoints: a tiny real one (hf_tiny) copied with its config.json or other files
rewritten (num_hidden_layers 10**9, a safetensors header that lies), and the converter run
on one in a child process of its own, bounded in time and watched for memory, so that a
regression fails its test instead of swapping the machine."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from tests.support.watchdog import MemoryWatchdog

LIMIT_MIB = 900           # converting a tiny checkpoint takes about 100 MiB
SECONDS = 120


def rewritten(base: Path, directory: Path, config: dict | None = None,
              files: dict | None = None) -> Path:
    """A copy of the checkpoint base in directory, config.json's keys updated from config
    (nested dicts replaced whole), files ({name: bytes or text}) written over it."""
    shutil.copytree(base, directory)
    if config:
        path = directory / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    for name, data in (files or {}).items():
        (directory / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return directory


def safetensors(header: dict, data: bytes = b"") -> bytes:
    """A safetensors file of header (not checked: it may lie) and data."""
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def convert_in_child(checkpoint: Path) -> tuple[int, str]:
    """`python -m runner convert checkpoint` in a child watched for memory (past LIMIT_MIB
    it is killed and the test fails) and time: its exit status and last line on stderr."""
    process = subprocess.Popen(
        [sys.executable, "-m", "runner", "convert", str(checkpoint), "-o",
         str(checkpoint.parent / f"{checkpoint.name}.gguf")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=checkpoint.parent)
    with MemoryWatchdog(process.pid, limit_mib=LIMIT_MIB):
        try:
            _, errors = process.communicate(timeout=SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise AssertionError(f"converting {checkpoint} took more than {SECONDS} s") \
                from None
    lines = [line for line in errors.replace("\r", "\n").splitlines() if line.strip()]
    return process.returncode, lines[-1] if lines else ""
