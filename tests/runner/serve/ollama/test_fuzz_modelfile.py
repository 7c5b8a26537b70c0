"""The Modelfile writer fuzzed (atheris) for a bounded time with what a pulled model's
manifest may store (tests/fuzz/modelfile.py): it always writes, never raises."""

from __future__ import annotations

import pytest

from tests.fuzz.modelfile import SEEDS
from tests.support.fuzzing import fuzz


@pytest.mark.slow
def test_the_modelfile_of_any_pulled_manifest_is_written(tmp_path):
    fuzz("modelfile", 45, SEEDS, tmp_path)
