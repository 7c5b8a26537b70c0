"""The CLI against a running server (RUNNER_HOST), as `ollama` talks to its server; and
`bench` measuring it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from tests.support.rpc_servers import free_port


def cli(*args, host: str, stdin: str = ""):
    return subprocess.run([sys.executable, "-m", "runner", *args], input=stdin, text=True,
                          capture_output=True, timeout=300, cwd=tempfile.gettempdir(),
                          env={**os.environ, "RUNNER_HOST": host})


@pytest.fixture(scope="module")
def host(server):
    return server.url.split("://")[1]


def test_run_list_ps_stop_show_cp_rm_through_the_server(host):
    ran = cli("run", "smollm2:135m", "The capital of France is", "--raw", "--temperature", "0",
              "--num-predict", "3", host=host)
    assert ran.returncode == 0 and ran.stdout == " Paris.\n\n", ran.stderr
    listed = cli("list", host=host)
    assert listed.stdout.startswith("NAME") and "smollm2:135m" in listed.stdout
    ps = cli("ps", host=host).stdout
    assert "smollm2:135m" in ps and "100% CPU" in ps
    assert cli("stop", "smollm2:135m", host=host).returncode == 0
    assert "smollm2:135m" not in cli("ps", host=host).stdout
    shown = cli("show", "tiny-qwen", host=host).stdout
    assert "capabilities     completion, tools, thinking" in shown
    assert cli("cp", "tiny-qwen", "twin", host=host).returncode == 0
    assert "twin:latest" in cli("list", host=host).stdout
    assert cli("rm", "twin", host=host).returncode == 0
    assert "twin:latest" not in cli("list", host=host).stdout
    missing = cli("rm", "twin", host=host)
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_chat_history_through_the_server(host):
    chat = cli("run", "smollm2:135m", "--num-predict", "4", host=host,
               stdin="Hello!\nAnd again?\n")
    assert chat.returncode == 0 and len([ln for ln in chat.stdout.splitlines() if ln]) >= 2


def test_ps_and_stop_need_a_server():
    nowhere = f"127.0.0.1:{free_port()}"
    for command in (["ps"], ["stop", "smollm2:135m"]):
        result = cli(*command, host=nowhere)
        assert result.returncode == 1 and "No server is running" in result.stderr


def test_bench_prints_its_table(host):
    result = cli("bench", "smollm2:135m", "--prompt-tokens", "64", "--num-predict", "8",
                 "--parallel", "1,2", host=host)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split()[:2] == ["parallel", "prompt"] and len(lines) == 4
    prompt_tokens = int(lines[2].split()[1])
    assert abs(prompt_tokens - 64) <= 8
