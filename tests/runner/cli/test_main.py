"""`python -m runner` as a user runs it: real subprocesses on the pulled models."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import pytest

from runner.loading import store

from tests.support.cli import cli


@pytest.fixture(scope="module", autouse=True)
def pulled(model_paths):
    return model_paths


def test_run_raw_prints_only_the_continuation():
    result = cli("run", "smollm2:135m", "The capital of France is", "--raw", "--temperature", "0",
                 "--num-predict", "6")
    assert result.returncode == 0, result.stderr
    assert result.stdout == " Paris.\n\nThe United\n"


def test_run_with_the_chat_template_and_interactive_history():
    result = cli("run", "gemma3:270m-base", "--temperature", "0", "--num-predict", "8",
                 stdin="Hello!\nWhat is 2+2?\n")
    assert result.returncode == 0, result.stderr
    assert len([line for line in result.stdout.splitlines() if line.strip()]) >= 2


def test_the_prompt_may_follow_the_options():
    result = cli("run", "smollm2:135m", "--raw", "--temperature", "0", "--num-predict", "6",
                 "--local", "The capital of France is")
    assert result.returncode == 0, result.stderr
    assert result.stdout == " Paris.\n\nThe United\n"
    two = cli("run", "smollm2:135m", "--local", "one", "two")
    assert two.returncode == 2 and "unrecognized arguments" in two.stderr


def test_a_reader_that_goes_away_ends_the_output_quietly():
    shell = subprocess.run(f"{sys.executable} -m runner run smollm2:135m --raw --local "
                           "--temperature 0 --num-predict 200 'Once upon a time' | head -c 5",
                           shell=True, capture_output=True, text=True, timeout=300,
                           cwd=tempfile.gettempdir())
    assert len(shell.stdout) == 5 and "Traceback" not in shell.stderr


def test_tokenize_reads_stdin():
    parsed = json.loads(cli("tokenize", "smollm2:135m", stdin="Hi <|im_end|>").stdout)
    plain = json.loads(cli("tokenize", "smollm2:135m", "--no-parse-special",
                           stdin="Hi <|im_end|>").stdout)
    assert parsed[-1] == 2 and 2 not in plain and len(plain) > len(parsed)


def test_show_describes_the_model():
    out = cli("show", "gemma3:270m-base").stdout
    assert "architecture     gemma3" in out and "quantization     Q4_K_M" in out
    assert "context length   32768" in out and "Gemma turns" in out


def test_errors_are_one_line_and_exit_1(tmp_path):
    result = cli("run", "nosuch:1b", "x")
    assert result.returncode == 1 and result.stderr.startswith("error: ")
    assert "known model name" in result.stderr and "Traceback" not in result.stderr
    result = cli("run", "gemma3:270m-base", "x", "--no-pull", env={"RUNNER_MODELS": str(tmp_path)})
    assert "run: python -m runner pull gemma3:270m-base" in result.stderr
    result = cli("run", "smollm2:135m", "x", "--top-p", "3")
    assert result.returncode == 1 and "top_p must be" in result.stderr


def test_pull_is_a_no_op_the_second_time(model_paths):
    before = model_paths["smollm2"].stat().st_mtime_ns
    result = cli("pull", "smollm2:135m")
    assert result.returncode == 0 and result.stdout.strip() == str(model_paths["smollm2"])
    assert model_paths["smollm2"].stat().st_mtime_ns == before
    assert store.path_of("smollm2:135m") == model_paths["smollm2"]


def test_run_pulls_a_missing_model_and_goes_on(tmp_path):
    result = cli("run", "smollm2:135m", "The capital of France is", "--raw", "--temperature",
                 "0", "--num-predict", "2", env={"RUNNER_MODELS": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout == " Paris.\n"
    # not a terminal: one line says so, no progress bars
    assert result.stderr.count("\n") == 1 and "Pulling smollm2:135m" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == [store.CATALOG["smollm2:135m"].filename]


def test_the_bare_command_lists_the_commands():
    result = cli()
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    for command in ("pull", "run", "tokenize", "show", "convert", "quantize", "--model"):
        assert any(line.split()[:1] == [command] for line in lines), command
