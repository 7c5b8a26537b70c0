"""Coverage-guided fuzzing with atheris (libFuzzer for Python), bounded in time and memory,
for the parsers a stranger's bytes reach (the GGUF reader, Go templates, Modelfiles).

A target is a module under tests/fuzz/ that defines `one_input(data: bytes)`: it parses the
bytes and may raise only the errors the parser documents for bad input (those are the
"clear error" path); anything else, a hang past TIMEOUT or memory past RSS_LIMIT_MB is a
finding. `fuzz(target, seconds, seeds, workdir)` runs it in a child process from the seed
inputs and raises AssertionError with libFuzzer's report and the crashing input's path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RSS_LIMIT_MB = 1024
TIMEOUT = 10                      # seconds one input may take
# the editable install's own finder loads runner and pyggml through a loader atheris does not
# instrument (no coverage, so libFuzzer mutates blindly): the plain path finder goes first
RUNNER = """
import importlib.machinery
import sys
import atheris
sys.meta_path.insert(0, importlib.machinery.PathFinder)
with atheris.instrument_imports(include=["runner", "pyggml"]):
    import importlib
    target = importlib.import_module(sys.argv[1])
atheris.Setup(sys.argv[1:], target.one_input)
atheris.Fuzz()
"""


def fuzz(target: str, seconds: int, seeds: list[bytes], workdir: Path) -> None:
    """Fuzz tests.fuzz.<target> for seconds from seeds; AssertionError on a finding."""
    pytest.importorskip("atheris")
    corpus = workdir / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for n, seed in enumerate(seeds):
        (corpus / f"seed-{n}").write_bytes(seed)
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-c", RUNNER, f"tests.fuzz.{target}",
               f"-max_total_time={seconds}", f"-rss_limit_mb={RSS_LIMIT_MB}",
               f"-timeout={TIMEOUT}", f"-artifact_prefix={workdir}/", "-print_final_stats=1",
               str(corpus)]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True,
                          timeout=seconds + 120, env={**os.environ, "PYTHONPATH": str(root)})
    if done.returncode != 0:
        found = sorted(str(p) for p in workdir.glob("crash-*")) + \
            sorted(str(p) for p in workdir.glob("timeout-*")) + \
            sorted(str(p) for p in workdir.glob("oom-*"))
        raise AssertionError(f"fuzzing {target} found a fault (inputs: {found}):\n"
                             f"{done.stderr[-6000:]}")
