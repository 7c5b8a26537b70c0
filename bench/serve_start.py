"""How long `python -m runner serve` takes to answer, what memory it holds once it does, and
whether it loaded the ggml library (it drives runner subprocesses and never computes).

    python bench/serve_start.py [--repeat 5] [--python PATH ...]

Each --python (default: this interpreter) is an environment with the project installed, so
two checkouts compare side by side, alternating; the store is an empty temporary folder.
Prints the median time to the first answer of GET /api/version, the resident memory then
(VmRSS), and whether a libggml is mapped into the process.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_once(python: str, models: str) -> tuple[float, int, bool]:
    """(seconds to the first answer, resident bytes then, ggml mapped)."""
    port = free_port()
    started = time.perf_counter()
    process = subprocess.Popen([python, "-m", "runner", "serve", "--port", str(port)],
                               cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL,
                               env={**os.environ, "RUNNER_MODELS": models})
    try:
        deadline = started + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/api/version", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.perf_counter() > deadline or process.poll() is not None:
                    raise RuntimeError(f"{python} -m runner serve did not answer.") from None
                time.sleep(0.005)
        elapsed = time.perf_counter() - started
        with open(f"/proc/{process.pid}/status") as status:
            rss = next(int(line.split()[1]) * 1024 for line in status
                       if line.startswith("VmRSS:"))
        with open(f"/proc/{process.pid}/maps") as maps:
            ggml = "libggml" in maps.read()
        return elapsed, rss, ggml
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--python", action="append", default=[],
                        help="an interpreter whose environment has the project (repeatable)")
    args = parser.parse_args()
    pythons = args.python or [sys.executable]
    found = {python: [] for python in pythons}
    with tempfile.TemporaryDirectory() as models:
        for _ in range(args.repeat):
            for python in pythons:                       # alternating, one of each per round
                found[python].append(start_once(python, models))
    print("| python | start to first answer (median) | VmRSS (median) | libggml loaded |")
    print("| --- | --- | --- | --- |")
    for python, runs in found.items():
        seconds = statistics.median(r[0] for r in runs)
        rss = statistics.median(r[1] for r in runs)
        print(f"| {python} | {seconds * 1000:.0f} ms | {rss / 2**20:.1f} MiB | "
              f"{'yes' if any(r[2] for r in runs) else 'no'} |")


if __name__ == "__main__":
    main()
