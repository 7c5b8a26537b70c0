"""A pytest plugin for llama.cpp's server tests (tools/server/tests, from the pinned archive):
their ServerProcess starts this project's server instead of llama-server, over the store in
OURS_STORE, with the slots and context they ask for; their model presets download nothing.
llama-server serves one model under whatever name a request gives, so the store's model
"test" (OURS_MODEL, or OURS_EMBED_MODEL for their embedding presets; with the chat template
a test gives as --chat-template-file) is also created under the names their OpenAI-client
calls give, and their own requests name "test". Loaded by test_llamacpp_suite.py with -p."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from pathlib import Path

import requests
import utils

from runner.serve.library.store import Library


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# the model names their OpenAI-client calls give
ALIASES = ("gpt-3.5-turbo-instruct", "gpt-4.1", "davinci-002", "text-embedding-3-small")
# A seed, so that a run's results do not hang on the draw. Their tests that want a reply
# cut at max_tokens (finish_reason "length") presume their trained model, which does not end
# within a few tokens; the tiny random one, drawing afresh, drew one of its 2 end tokens of
# 600 within 8 tokens in 4 requests of 60, and test_chat_completions_multiple_choices (two
# requests of two choices) failed about one run in 8. A request's own seed still wins.
SAMPLING = {"seed": 0}


def start(self, timeout_seconds: int = 60) -> None:
    self.server_port = _free_port()
    model = os.environ["OURS_EMBED_MODEL" if self.server_embeddings else "OURS_MODEL"]
    template = None
    if self.chat_template_file:                      # their --chat-template-file: the model's
        path = (Path.cwd() / self.chat_template_file).resolve()
        template = path.read_text() if path.is_file() else None
    library = Library(os.environ["OURS_STORE"])
    for name in {"test", *ALIASES, self.model_alias or "test"}:
        library.create(name, model, template=template, parameters=SAMPLING)
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
    """Their requests leave out the model or name any (llama-server serves one); OpenAI's
    API and ours need a model that is there: they name "test"."""
    def call(self, verb, path, data=None, *args, **kwargs):
        if isinstance(data, dict):
            data = {**data, "model": "test"}
        return method(self, verb, path, data, *args, **kwargs)
    return call


utils.ServerProcess.make_request = named(utils.ServerProcess.make_request)
utils.ServerProcess.make_stream_request = named(utils.ServerProcess.make_stream_request)
utils.ServerProcess.start = start
utils.ServerPreset.load_all = staticmethod(lambda: None)
