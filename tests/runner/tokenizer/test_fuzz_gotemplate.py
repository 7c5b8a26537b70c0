"""The Go-template parser and renderer fuzzed (atheris) for a bounded time from templates in
the style of Ollama's own: a stranger's template layer gives a GoTemplateError sentence,
never another exception, a hang or runaway memory."""

from __future__ import annotations

import pytest

from tests.fuzz.go_template import SEEDS
from tests.support.fuzzing import fuzz


@pytest.mark.slow
def test_go_templates_fuzzed_raise_only_template_errors(tmp_path):
    fuzz("go_template", 45, [seed.encode() for seed in SEEDS], tmp_path)
