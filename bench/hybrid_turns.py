"""Prefix reuse on a hybrid model (Qwen 3.5's recurrent states): a 10-turn chat sent to our
server and to llama.cpp's server side by side, the same messages to both, and per turn the
prompt tokens each evaluated (the rest came from its cache), the wall time of each request,
and what each said it reused (our `cached_tokens`, llama-server's `cache_n`).

    python bench/family_twin.py DIR --family qwen35        # the twin, with its template
    python bench/hybrid_turns.py --model DIR/qwen35-twin-Q4_K_M.gguf \\
        --llama-server PATH/TO/llama-server

Both serve one slot with a context of 8192 on 2 threads, at their default checkpoints (ours:
as many as fit beside the KV cache's size, at least 2; llama-server's: 32, in host memory).
Each turn's assistant message is the client's own text (as a client that edits the reply,
or a template that rewrites it, sends), so both servers see the same prompts; a turn can
at best reuse everything up to the previous turn's generation prompt.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path[0] = str(Path(__file__).resolve().parents[1])

from bench.serve_start import free_port  # noqa: E402
from runner.serve.library.store import Library  # noqa: E402

NAME = "qwen35-twin"
FACTS = ["The river runs north past the old mill and the bakery on the corner of the square.",
         "Three ships left the harbour at dawn carrying salt, wool and barrels of cider.",
         "The library keeps its maps in a cold room behind the reading hall upstairs.",
         "A storm in the valley knocked down the fence around the orchard last winter."]


def wait(url: str, process: subprocess.Popen, path: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited with {process.returncode}")
        try:
            if httpx.get(url + path, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not start")


def ours(model: Path, work: Path):
    store = work / "store"
    Library(store).create(NAME, model)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "runner", "serve", "--port", str(port)],
        env={**os.environ, "RUNNER_MODELS": str(store), "RUNNER_NUM_PARALLEL": "1",
             "RUNNER_CONTEXT_LENGTH": "8192"},
        stdout=subprocess.DEVNULL, stderr=open(work / "ours.log", "w"))
    url = f"http://127.0.0.1:{port}"
    wait(url, process, "/")
    return process, url


def llama(binary: str, model: Path, work: Path, threads: int):
    port = free_port()
    process = subprocess.Popen(
        [binary, "-m", str(model), "--port", str(port), "-t", str(threads), "-c", "8192",
         "-np", "1", "--jinja", "--no-webui"],
        stdout=subprocess.DEVNULL, stderr=open(work / "llama.log", "w"))
    url = f"http://127.0.0.1:{port}"
    wait(url, process, "/health")
    return process, url


def turn(url: str, messages: list, theirs: bool) -> tuple[int, int, int, float]:
    """(prompt tokens, evaluated, said cached, seconds) of one request."""
    started = time.perf_counter()
    reply = httpx.post(url + "/v1/chat/completions", timeout=3600, json={
        "model": NAME, "messages": messages, "max_tokens": 8, "temperature": 0,
        "stream": False}).json()
    seconds = time.perf_counter() - started
    prompt = reply["usage"]["prompt_tokens"]
    if theirs:
        timings = reply["timings"]
        return prompt, timings["prompt_n"], timings.get("cache_n", 0), seconds
    cached = reply["usage"]["prompt_tokens_details"]["cached_tokens"]
    return prompt, prompt - cached, cached, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--llama-server", required=True)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        servers = {"ours": ours(args.model, work),
                   "llama.cpp": llama(args.llama_server, args.model, work, args.threads)}
        try:
            rows = []
            messages = [{"role": "system", "content": "You are a careful note taker."}]
            for index in range(args.turns):
                messages.append({"role": "user", "content": f"Note {index}: "
                                 + " ".join(FACTS[(index + j) % len(FACTS)] for j in range(2))})
                row = [index + 1]
                for name, (_, url) in servers.items():     # one after the other, not at once
                    row.append(turn(url, messages, name == "llama.cpp"))
                rows.append(row)
                messages.append({"role": "assistant", "content": f"Noted, {index}."})
        finally:
            for process, _ in servers.values():
                process.terminate()
                process.wait()
    print("| turn | prompt tokens | ours evaluated | ours cached_tokens | llama.cpp evaluated "
          "| llama.cpp cache_n | ours s | llama.cpp s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for number, (prompt, ev, cached, secs), (theirs_prompt, tev, tcached, tsecs) in rows:
        print(f"| {number} | {prompt} ({theirs_prompt}) | {ev} | {cached} | {tev} | {tcached} "
              f"| {secs:.2f} | {tsecs:.2f} |")
    totals = [sum(r[i][j] for r in rows) for i in (1, 2) for j in (1, 3)]
    print(f"\nevaluated in all: ours {totals[0]}, llama.cpp {totals[2]}; "
          f"seconds: ours {totals[1]:.1f}, llama.cpp {totals[3]:.1f}")


if __name__ == "__main__":
    main()
