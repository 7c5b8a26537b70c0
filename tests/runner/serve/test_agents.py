"""The agents people run, installed as they ship and pointed at the server as their
documentation points them at Ollama: Claude Code (ANTHROPIC_BASE_URL), Codex (`--oss`),
opencode (an OpenAI-compatible provider) and the OpenAI Agents SDK each finish a turn with
a tiny Qwen 3 that has tools in its template, every request they send answered 2xx (the
server's own log checked). The Agents SDK passes tool_choice, so its turn's call is forced:
the tool runs and its result goes back.

Slow (npm installs the agents from its registry; opencode fetches its provider package
when it starts): `pytest -m slow tests/runner/serve/test_agents.py`; skipped without node
and npm, or when npm cannot install them. The tiny tokenizer spends a token on about three
characters, so the agents' long system prompts need a context of 32768."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from runner.convert import convert

from tests.support.server import QWEN_TOOLS_TEMPLATE, ServerProcess, templated_checkpoint

pytestmark = pytest.mark.slow
AGENTS = ("@anthropic-ai/claude-code@2", "@openai/codex@0", "opencode-ai@1")
MODEL = "tiny-agent"
LINE = re.compile(r"\| (\d{3}) \|.*\| (\w+) +(\".*\")$")


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory) -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    work = tmp_path_factory.mktemp("agents")
    done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", *AGENTS],
                          cwd=work, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        pytest.skip(f"npm could not install the agents: {done.stderr.strip()[-500:]}")
    return work / "node_modules" / ".bin"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("agent-model")
    hf = templated_checkpoint("qwen3", work / "hf", QWEN_TOOLS_TEMPLATE,
                              max_position_embeddings=32768)
    running = ServerProcess(tmp_path_factory.mktemp("agent-store"),
                            tmp_path_factory.mktemp("agent-serve"),
                            RUNNER_CONTEXT_LENGTH=32768, RUNNER_NUM_PARALLEL=1)
    running.create(MODEL, {"model.gguf": convert(hf, work / "model.gguf", "f32",
                                                 progress=False)})
    yield running
    running.stop()


def requests_since(server: ServerProcess, start: int) -> list[tuple[int, str, str]]:
    """(status, method, path) of each request the server logged after byte start."""
    text = server.log.read_bytes()[start:].decode("utf-8", "replace")
    return [(int(m.group(1)), m.group(2), json.loads(m.group(3)))
            for m in map(LINE.search, text.splitlines()) if m]


def run_agent(server, command: list[str], env: dict, cwd: Path) -> list[tuple[int, str, str]]:
    start = server.log.stat().st_size
    home = cwd / "home"                        # the agent's own settings, apart from the work
    home.mkdir(exist_ok=True)
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=1500,
                          env={**os.environ, "HOME": str(home), "PWD": str(cwd), **env})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = requests_since(server, start)
    assert seen and all(200 <= status < 300 for status, _, _ in seen), seen
    return seen


def test_claude_code_finishes_a_turn(server, bin_dir, tmp_path):
    seen = run_agent(server, [str(bin_dir / "claude"), "-p", "Say hi", "--model", MODEL,
                              "--max-turns", "1", "--system-prompt", "You are a test agent.",
                              "--tools", "Bash"],
                     {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_AUTH_TOKEN": "ollama",
                      "ANTHROPIC_API_KEY": "", "DISABLE_TELEMETRY": "1",
                      "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}, tmp_path)
    assert ("POST", "/v1/messages?beta=true") in [(m, p) for _, m, p in seen]


def test_codex_finishes_a_turn(server, bin_dir, tmp_path):
    (tmp_path / ".codex").mkdir()
    seen = run_agent(server, [str(bin_dir / "codex"), "exec", "--oss", "--local-provider",
                              "ollama", "-m", f"{MODEL}:latest", "--skip-git-repo-check",
                              "Say hi"],
                     {"CODEX_HOME": str(tmp_path / ".codex"),
                      "CODEX_OSS_BASE_URL": server.url + "/v1"}, tmp_path)
    paths = [p for _, _, p in seen]
    assert "/api/version" in paths and "/v1/responses" in paths


def test_opencode_finishes_a_turn(server, bin_dir, tmp_path):
    (tmp_path / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"local": {"npm": "@ai-sdk/openai-compatible", "name": "Local",
                               "options": {"baseURL": server.url + "/v1"},
                               "models": {MODEL: {"name": MODEL}}}},
        "model": f"local/{MODEL}"}))
    seen = run_agent(server, [str(bin_dir / "opencode"), "run", "--model", f"local/{MODEL}",
                              "Say hi"], {}, tmp_path)
    assert ("POST", "/v1/chat/completions") in [(m, p) for _, m, p in seen]


def test_the_openai_agents_sdk_runs_a_forced_tool_and_sends_its_result(server):
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    calls = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather of a city."""
        calls.append(city)
        return "Sunny, 20C"

    model = agents.OpenAIChatCompletionsModel(
        model=MODEL, openai_client=AsyncOpenAI(base_url=server.url + "/v1", api_key="unused"))
    agent = agents.Agent(name="weather", instructions="Use the tools.", model=model,
                         tools=[get_weather],
                         model_settings=agents.ModelSettings(tool_choice="required",
                                                             max_tokens=1000, temperature=0))
    agents.set_tracing_disabled(True)
    start = server.log.stat().st_size
    result = agents.Runner.run_sync(agent, "Weather in Paris?", max_turns=3)
    assert len(calls) == 1 and isinstance(calls[0], str)
    assert isinstance(result.final_output, str)
    seen = requests_since(server, start)
    assert len(seen) >= 2 and all(200 <= status < 300 for status, _, _ in seen)
    outputs = [item for item in result.to_input_list()
               if item.get("type") == "function_call_output"]
    assert outputs and outputs[0]["output"] == "Sunny, 20C"
