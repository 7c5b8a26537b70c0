"""The README's command table works as written: every command it names exists, and takes
every flag its row names, run as a user runs it (`python -m ...`) from a directory outside
the checkout with no PYTHONPATH, as the README says to run a plain install, so that the
installed package answers, not the source tree. Each is asked for its --help (no model, no
server); `python -m runner` and `python -m pyggml` alone run as they are."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.server           # starts processes: outside the quick tier


def table_rows() -> list[tuple[list[list[str]], set[str]]]:
    """Each row of the command table: its commands (argv after `python -m`), and the flags
    the whole row names."""
    text = (ROOT / "README.md").read_text()
    table = text.split("| command | what it does |", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.splitlines()[2:]:
        first, rest = line.split(" | ", 1)
        spans = re.findall(r"`([^`]+)`", first)
        commands, base = [], None
        for span in spans:
            words = span.split()
            if words[:2] == ["python", "-m"]:
                base = words[2]
                commands.append(words[2:])
            elif base is not None:                 # `ps`, `stop MODEL`: the same program's
                commands.append([base, *words])
        # its own flags: in its commands, and the description's spans that are flags (a
        # span such as `run --rpc` names another command's)
        named = " ".join(spans) + " " + " ".join(
            span for span in re.findall(r"`([^`]+)`", rest) if span.startswith("--"))
        flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", named))
        rows.append((commands, flags))
    return rows


def help_argv(command: list[str]) -> list[str]:
    """The argv that shows a command's usage: its words up to the first placeholder
    (MODEL, [PROMPT], ...) and --help; the runner process's form with a model named."""
    program, *words = command
    if words[:1] == ["--model"]:
        return [program, "--model", "x", "--help"]
    verbs = [w for w in words if re.fullmatch(r"[a-z][a-z-]*", w)]
    if not verbs:
        return [program]
    return [program, verbs[0], "--help"]


ROWS = table_rows()


def test_the_table_was_read():
    programs = {command[0] for commands, _ in ROWS for command in commands}
    assert programs == {"runner", "pyggml"} and len(ROWS) >= 14


@pytest.mark.parametrize("commands, flags", ROWS,
                         ids=[" ".join(c[0] for c in commands) for commands, _ in ROWS])
def test_each_command_exists_and_takes_the_flags_its_row_names(tmp_path, commands, flags):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    usage = ""
    for command in commands:
        argv = [sys.executable, "-m", *help_argv(command)]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, f"{' '.join(argv[1:])}: {done.stderr[-2000:]}"
        usage += done.stdout + done.stderr
    missing = sorted(flag for flag in flags if flag not in usage)
    assert not missing, f"{' '.join(commands[0])} does not take {missing}"
