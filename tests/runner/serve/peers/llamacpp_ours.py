"""A pytest plugin for llama.cpp's server tests (tools/server/tests, from the pinned archive):
their ServerProcess starts this project's server instead of llama-server, over the store in
OURS_STORE (whose model "test", OURS_MODEL, the requests name; with the chat template a test
gives as --chat-template-file), with the slots and context they ask for; their model
presets download nothing. Loaded by test_llamacpp_suite.py with -p."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from pathlib import Path

import requests
import utils

from runner.serve.library import Library


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(self, timeout_seconds: int = 60) -> None:
    self.server_port = _free_port()
    if self.chat_template_file:                      # their --chat-template-file: the model's
        template = (Path.cwd() / self.chat_template_file).resolve()
        if template.is_file():
            Library(os.environ["OURS_STORE"]).create(
                "test", os.environ["OURS_MODEL"], template=template.read_text())
    slots = self.n_slots or 1
    env = {**os.environ, "RUNNER_MODELS": os.environ["OURS_STORE"],
           "RUNNER_NUM_PARALLEL": str(slots),
           "RUNNER_CONTEXT_LENGTH": str(max(256, (self.n_ctx or 4096) // slots))}
    self.process = subprocess.Popen(
        [sys.executable, "-m", "runner", "serve", "--port", str(self.server_port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        try:
            if requests.get(self.make_url("/"), timeout=1).status_code == 200:
                utils.server_instances.add(self)
                return
        except requests.RequestException:
            time.sleep(0.1)
    raise TimeoutError("our server did not start")


def named(method):
    """Their requests may leave out the model (llama-server serves one); OpenAI's API and
    ours need it: the model "test" is named where they do not name one."""
    def call(self, verb, path, data=None, *args, **kwargs):
        if isinstance(data, dict) and "model" not in data:
            data = {**data, "model": "test"}
        return method(self, verb, path, data, *args, **kwargs)
    return call


utils.ServerProcess.make_request = named(utils.ServerProcess.make_request)
utils.ServerProcess.make_stream_request = named(utils.ServerProcess.make_stream_request)
utils.ServerProcess.start = start
utils.ServerPreset.load_all = staticmethod(lambda: None)
