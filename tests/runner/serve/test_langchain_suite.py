"""LangChain's own Ollama integration tests (tests/integration_tests of the langchain-ollama
sdist, their standard ChatModel and Embeddings suites included) run against our server. They
are installed with pip at test time into a virtual environment of their own (their pytest
plugins stay out of ours), and name Ollama's models: "llama3.1", "deepseek-r1:1.5b" and
"gpt-oss:20b" are the tiny Qwen 3 with tools and thinking, the embedding model the tiny BERT.
A random tiny model neither chooses tools nor thinks nor follows a prompt, so the tests that
need one that does are listed with the reason; every other one must pass.

    pytest -m slow tests/runner/serve/test_langchain_suite.py"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile

import pytest

from runner.serve.library.store import Library

from tests.support.server import ServerProcess

pytestmark = pytest.mark.slow
PACKAGES = ("langchain-ollama==1.1.0", "langchain-tests==1.1.9")
ALIASES = ("llama3.1", "deepseek-r1:1.5b", "gpt-oss:20b")
CHOOSES_TOOLS = "needs a model that chooses to call the tool (Ollama has no tool_choice)"
THINKS = "needs a model that thinks and then answers (emits </think>)"
# test -> why it cannot pass here (not an incompatibility of the API)
NOT_OURS = {
    "test_llms.py::test__stream_with_reasoning": THINKS,
    "test_llms.py::test__astream_with_reasoning": THINKS,
    "test_chat_models.py::test_structured_output[function_calling]": CHOOSES_TOOLS,
    "test_chat_models.py::test_tool_streaming": CHOOSES_TOOLS,
    "test_chat_models.py::test_tool_astreaming": CHOOSES_TOOLS,
    "test_chat_models.py::test_agent_loop": CHOOSES_TOOLS,
    "test_chat_models_reasoning.py::test_reasoning_stream": THINKS,
    "test_chat_models_reasoning.py::test_reasoning_invoke": THINKS,
    "test_chat_models_reasoning.py::test_reasoning_modes_behavior": THINKS,
    "test_chat_models_reasoning.py::test_reasoning_content_round_trip": THINKS,
    "test_chat_models_standard.py::TestChatOllama::test_bind_runnables_as_tools": CHOOSES_TOOLS,
    "test_chat_models_standard.py::TestChatOllama::test_agent_loop": CHOOSES_TOOLS,
    "test_chat_models_standard.py::TestChatOllama::test_unicode_tool_call_integration":
        CHOOSES_TOOLS,
    "test_chat_models_standard.py::TestChatOllama::test_json_mode":
        "needs a model that writes the keys the prompt asks for (format json is a JSON "
        "object, of any keys)",
    "test_chat_models_standard.py::TestChatOllama::test_image_inputs":
        "downloads an image from the internet",
}


def why_not_ours(name: str) -> str | None:
    """The reason a test (by its file and id, or its name for every parameter) cannot pass."""
    short = name.rsplit("/", 1)[-1]
    return NOT_OURS.get(short) or NOT_OURS.get(short.split("[")[0])


@pytest.fixture(scope="module")
def langchain(tmp_path_factory):
    """A virtual environment with LangChain's packages, and their integration tests."""
    work = tmp_path_factory.mktemp("langchain")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    installed = subprocess.run([python, "-m", "pip", "install", "-q", *PACKAGES],
                               capture_output=True, text=True, timeout=900)
    if installed.returncode != 0:
        pytest.skip(f"pip could not install LangChain: {installed.stderr.strip()[-500:]}")
    subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    "-d", str(work), PACKAGES[0]], check=True, capture_output=True,
                   timeout=600)
    archive = next(work.glob("langchain_ollama-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    return python, next(work.glob("langchain_ollama-*/"))


def test_langchains_ollama_integration_tests_pass_against_ours(langchain, models_dir,
                                                                tiny_models, tmp_path):
    python, package = langchain
    library = Library(models_dir)
    for alias in ALIASES:
        library.create(alias, tiny_models["qwen"])
    running = ServerProcess(models_dir, tmp_path, RUNNER_NUM_PARALLEL=2)
    outcomes = {}
    try:
        for tests, model in (("tests/integration_tests/test_embeddings.py", "tiny-bert"),
                             ("tests/integration_tests", "llama3.1")):
            done = subprocess.run(
                [python, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", tests,
                 *(["--ignore=tests/integration_tests/test_embeddings.py"]
                   if tests.endswith("integration_tests") else [])],
                cwd=package, capture_output=True, text=True, timeout=1500,
                env={**os.environ, "OLLAMA_HOST": running.url, "OLLAMA_TEST_MODEL": model})
            outcomes.update((name, outcome) for outcome, name in re.findall(
                r"^(PASSED|FAILED|ERROR|XPASS|XFAIL) (\S+)", done.stdout, re.M))
    finally:
        assert running.stop() == 0
    passed = [name for name, outcome in outcomes.items() if outcome in ("PASSED", "XPASS")]
    assert len(passed) >= 50, done.stdout[-3000:] + done.stderr[-2000:]
    unexpected = {name for name, outcome in outcomes.items()
                  if outcome in ("FAILED", "ERROR") and why_not_ours(name) is None}
    assert not unexpected, "\n".join(sorted(unexpected)) + "\n" + done.stdout[-8000:]
