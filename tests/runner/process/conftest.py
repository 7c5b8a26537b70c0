"""Real runner subprocesses (`python -m runner --model ... --port 0`) on SmolLM2."""

from __future__ import annotations


import pytest
from tests.support.runner_process import RunnerProcess  # noqa: F401


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("runner")


@pytest.fixture(scope="module")
def served(model_paths, workdir):
    """Four parallel sequences of 256 tokens each."""
    runner = RunnerProcess(model_paths["smollm2"], workdir, "--parallel", "4",
                           "--ctx-size", "1024")
    runner.wait_status(0)
    yield runner
    runner.stop()
