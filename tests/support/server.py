"""A real server (`python -m runner serve`) on a free loopback port, its models made from
tiny transformers checkpoints with a chosen chat template, and the requests tests repeat."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.hf_tiny import checkpoint
from tests.support.rpc_servers import free_port

SHORT = {"num_predict": 2}          # a reply short enough not to matter


QWEN_TOOLS_TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call functions. Their signatures are within <tools></tools>:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

For each call, return a JSON object with the function name and arguments within <tool_call></tool_call> tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{{ message.content }}
{%- for call in message.tool_calls or [] %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}{% endif %}"""


class ServerProcess:
    def __init__(self, models: Path, workdir: Path, **env):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"serve-{time.monotonic_ns()}.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "serve", "--port", str(self.port)],
            cwd=workdir, stdout=self.log.open("w"), stderr=subprocess.STDOUT,
            env={**os.environ, "RUNNER_MODELS": str(models),
                 **{k: str(v) for k, v in env.items()}})
        self.client = httpx.Client(base_url=self.url, timeout=300)
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.client.get("/").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"The server did not start:\n{self.log.read_text()}")
            time.sleep(0.1)

    def create(self, name: str, files: dict) -> None:
        """/api/create of name from local files ({file name: path}), uploaded as blobs."""
        digests = {}
        for file_name, path in files.items():
            data = Path(path).read_bytes()
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            assert self.client.post(f"/api/blobs/{digest}", content=data).status_code == 201
            digests[file_name] = digest
        created = self.client.post("/api/create", json={"model": name, "files": digests,
                                                         "stream": False})
        assert created.status_code == 200, created.text

    @classmethod
    def exact(cls, tmp_path_factory, name: str, files: dict) -> "ServerProcess":
        """A server computing as the in-process comparisons do (one slot, an f32 cache, no
        flash attention), holding one model created from files ({file name: path})."""
        running = cls(tmp_path_factory.mktemp(f"{name}-store"),
                      tmp_path_factory.mktemp(f"{name}-serve"), RUNNER_NUM_PARALLEL=1,
                      RUNNER_KV_CACHE_TYPE="f32", RUNNER_FLASH_ATTENTION="false")
        running.create(name, files)
        return running

    def runner_pids(self) -> list[int]:
        """The server's child processes (its runners)."""
        found = []
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                text = status.read_text()
            except OSError:
                continue
            if f"\nPPid:\t{self.proc.pid}\n" in text:
                found.append(int(status.parent.name))
        return found

    def stop(self) -> int:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return -9
        return self.proc.returncode


def templated_checkpoint(kind: str, directory: Path, template: str, **config) -> Path:
    """A tiny checkpoint of kind (hf_tiny) whose tokenizer carries the chat template."""
    import json

    made = checkpoint(kind, directory, **config)
    settings_file = made / "tokenizer_config.json"
    settings = json.loads(settings_file.read_text())
    settings["chat_template"] = template
    settings_file.write_text(json.dumps(settings))
    return made


def generate(server, model="smollm2:135m", client=None, **body):
    return (client or server.client).post("/api/generate", json={
        "model": model, "prompt": "Hello", "stream": False, "options": SHORT, **body})


def loaded(server) -> list[str]:
    return [m["model"] for m in server.client.get("/api/ps").json()["models"]]


def eventually(check, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
