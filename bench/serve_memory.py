"""The server's peak memory (VmHWM) and wall time under concurrent requests that read model
metadata: 32 /api/show of Gemma 3 at once (a 262k-token vocabulary in its header), then 64
one-token chats with SmolLM2 at once.

    python bench/serve_memory.py [--python PATH ...]

Each --python (default: this interpreter) is an environment with the project installed, so
two checkouts compare side by side; the store links the pulled models.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

import httpx
from serve_start import free_port

from runner.loading import store

MODELS = ("smollm2:135m", "gemma3:270m-base")


def peak_mib(pid: int) -> int:
    return int(open(f"/proc/{pid}/status").read().split("VmHWM:")[1].split()[0]) // 1024


def at_once(count: int, call) -> float:
    threads = [threading.Thread(target=call) for _ in range(count)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def measure(python: str, models: str) -> tuple[int, int, float, int, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([python, "-m", "runner", "serve", "--port", str(port)],
                              env={**os.environ, "RUNNER_MODELS": models},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                httpx.get(url)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        base = peak_mib(server.pid)
        shows = at_once(32, lambda: httpx.post(f"{url}/api/show",
                                               json={"model": "gemma3:270m-base"}, timeout=300))
        after_shows = peak_mib(server.pid)
        body = {"model": "smollm2:135m", "stream": False, "options": {"num_predict": 1},
                "messages": [{"role": "user", "content": "hi"}]}
        httpx.post(f"{url}/api/chat", json=body, timeout=300)          # loads the model
        chats = at_once(64, lambda: httpx.post(f"{url}/api/chat", json=body, timeout=300))
        return base, after_shows, shows, peak_mib(server.pid), chats
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", action="append", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as models:
        for name in MODELS:
            path = store.pull(name, progress=False)
            os.symlink(path, os.path.join(models, path.name))
        print("| python | start MiB | after 32 shows MiB | shows s | after 64 chats MiB "
              "| chats s |")
        print("| --- | --- | --- | --- | --- | --- |")
        for python in args.python or [sys.executable]:
            base, shows_peak, shows, chats_peak, chats = measure(python, models)
            print(f"| {python} | {base} | {shows_peak} | {shows:.1f} | {chats_peak} | "
                  f"{chats:.1f} |")


if __name__ == "__main__":
    main()
