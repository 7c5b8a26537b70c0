"""A runner subprocess (`python -m runner`) on a free port, driven over the runner
protocol."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx


class RunnerProcess:
    def __init__(self, model: Path, workdir: Path, *flags: str):
        self.log = workdir / f"runner-{time.monotonic_ns()}.log"
        # started from a directory without the source tree: the installed package runs
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "--model", str(model), "--port", "0",
             "--threads", "2", *flags],
            cwd=workdir, stdout=subprocess.PIPE, stderr=self.log.open("w"), text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"The runner did not start: {line!r}\n{self.log.read_text()}")
        self.url = "http://" + line.split()[-1]
        self.client = httpx.Client(base_url=self.url, timeout=120)

    def health(self) -> dict:
        return self.client.get("/health").json()

    def wait_status(self, status: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.health()["status"] != status:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"status {self.health()} is not {status}\n"
                                     f"{self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def complete(self, prompt: str, client: httpx.Client | None = None, **body) -> list[dict]:
        """All NDJSON lines of a completion."""
        body = {"Prompt": prompt, **body}
        with (client or self.client).stream("POST", "/completion", json=body) as response:
            assert response.status_code == 200, response.read()
            return [json.loads(line) for line in response.iter_lines() if line]

    def rss(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(ln.split()[1] for ln in status.splitlines()
                        if ln.startswith("VmRSS"))) * 1024

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
