"""llama.cpp's own server tests for the APIs both servers speak, run against ours: the test
files come from the pinned source archive (tools/server/tests, not committed), their
ServerProcess starts our server (peers/llamacpp_ours.py) over a store whose model "test" is
the tiny Qwen 3 with tools and thinking. Tests that check what only llama-server has (its
own fields, its model's text) are listed with the reason; every other one must pass.

    pytest -m slow tests/runner/serve/test_llamacpp_suite.py"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from runner.serve.library import Library

from ...official_templates import pinned_archive

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
ROOT = HERE.parents[2]
SUITES = ["unit/test_compat_anthropic.py"]
# test -> why it cannot pass here (not an incompatibility of the API)
NOT_OURS = {
    "unit/test_compat_anthropic.py::test_anthropic_empty_messages":
        "llama-server answers an empty message list with a reply; Anthropic's API (and we) "
        "answer 400",
    "unit/test_compat_anthropic.py::test_anthropic_thinking_history_in_template":
        "calls llama-server's own /apply-template endpoint",
    "unit/test_compat_anthropic.py::test_anthropic_tool_result_with_image":
        "expects llama-server's 500 for an image a text model cannot take; we answer 400, "
        "as Ollama does",
    "unit/test_compat_anthropic.py::test_anthropic_vision_format_accepted":
        "likewise: llama-server's 500 where we answer 400",
    "unit/test_compat_anthropic.py::test_anthropic_vision_base64_with_multimodal_model":
        "downloads a test image and a vision model from Hugging Face",
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    archive, root = pinned_archive()
    top = tmp_path_factory.mktemp("llamacpp")
    with tarfile.open(archive) as tar:            # the tests and the templates they name
        for member in tar.getmembers():
            relative = member.name[len(root) + 1:]
            if member.isfile() and relative.startswith(("tools/server/tests/",
                                                         "models/templates/")):
                target = top / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
    work = top / "tools" / "server" / "tests"
    shutil.copy(HERE / "peers" / "llamacpp_ours.py", work / "llamacpp_ours.py")
    # their utils import wget for the model downloads this run never makes
    (work / "wget.py").write_text('def download(*args, **kwargs):\n'
                                  '    raise RuntimeError("this run downloads nothing")\n')
    return work


def test_llama_cpps_server_tests_pass_against_ours(suite, models_dir, tiny_models, tmp_path):
    Library(models_dir).create("test", tiny_models["qwen"])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "llamacpp_ours", "-q", "-rA", "-m", "not slow",
         "-p", "no:cacheprovider", *SUITES], cwd=suite, capture_output=True, text=True,
        timeout=1500, env={**os.environ, "OURS_STORE": str(models_dir),
                           "OURS_MODEL": str(tiny_models["qwen"]),
                           "PYTHONPATH": os.pathsep.join([str(suite), str(ROOT)])})
    results = {name: outcome for outcome, name in
               re.findall(r"^(PASSED|FAILED|ERROR) (\S+)", done.stdout, re.M)}
    assert results, done.stdout[-3000:] + done.stderr[-2000:]
    failed = {name for name, outcome in results.items() if outcome != "PASSED"}
    unexpected = failed - set(NOT_OURS)
    assert not unexpected, "\n".join(sorted(unexpected)) + "\n" + done.stdout[-8000:]
