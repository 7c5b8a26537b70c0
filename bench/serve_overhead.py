"""What the server adds over the runner alone, and what a JSON schema costs.

    python bench/serve_overhead.py [--model smollm2:135m] [--repeat 5] [--num-predict 128]

1. The same raw prompt streamed through the server's /api/generate and through a runner
   subprocess's /completion directly (both started here, same flags, alternating; best of
   --repeat): time to first token as the client sees it, and decode tokens/s.
2. Decode tokens/s with a JSON schema enforced (llguidance) against unconstrained, in
   process, same prompt and seed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import httpx

import runner
from runner.loading import store

PROMPT = "Write a long story about a lighthouse keeper and the sea. " * 4
SCHEMA = {"type": "object", "required": ["title", "chapters"], "properties": {
    "title": {"type": "string", "maxLength": 60},
    "chapters": {"type": "array", "items": {"type": "object", "required": ["name", "text"],
                                            "properties": {"name": {"type": "string"},
                                                           "text": {"type": "string"}}}}}}


def timed_stream(client: httpx.Client, path: str, body: dict, text_key: str) -> tuple[float, float]:
    started, first, done = time.perf_counter(), None, {}
    with client.stream("POST", path, json=body) as response:
        for line in response.iter_lines():
            if not line:
                continue
            chunk = json.loads(line)
            if first is None and chunk.get(text_key):
                first = time.perf_counter()
            if chunk.get("done"):
                done = chunk
    return (first - started) * 1e3, done["eval_count"] / done["eval_duration"] * 1e9


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def overhead(path, args) -> None:
    port = free_port()
    workdir = tempfile.mkdtemp()
    server = subprocess.Popen([sys.executable, "-m", "runner", "serve", "--port", str(port)],
                              cwd=workdir, stderr=subprocess.DEVNULL,
                              env={**os.environ, "RUNNER_MODELS": str(path.parent)})
    direct = subprocess.Popen([sys.executable, "-m", "runner", "--model", str(path), "--port",
                               "0", "--ctx-size", "4096", "--no-pull"], cwd=workdir,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    runner_url = "http://" + direct.stdout.readline().split()[-1]
    options = {"temperature": 0, "num_predict": args.num_predict}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as serve, \
                httpx.Client(base_url=runner_url, timeout=600) as alone:
            while True:
                try:
                    if serve.get("/").status_code == 200 and \
                            alone.get("/health").json()["status"] == 0:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            name = args.model if args.model in store.CATALOG else str(path)
            runs = {"server": [], "runner": []}
            for i in range(args.repeat + 1):                 # the first of each warms up
                prompt = f"{i}. {PROMPT}"                       # no prompt cache between runs
                runs["server"].append(timed_stream(serve, "/api/generate", {
                    "model": name, "prompt": prompt, "raw": True, "options": options},
                    "response"))
                runs["runner"].append(timed_stream(alone, "/completion", {
                    "Prompt": prompt, "Options": options}, "content"))
    finally:
        server.terminate()
        direct.terminate()
        server.wait()
        direct.wait()
    best = {k: (min(r[0] for r in v[1:]), max(r[1] for r in v[1:])) for k, v in runs.items()}
    print(f"{'':<24}{'first token ms':>16}{'decode tok/s':>14}")
    for key in ("runner", "server"):
        print(f"{key + (' /completion' if key == 'runner' else ' /api/generate'):<24}"
              f"{best[key][0]:>16.0f}{best[key][1]:>14.1f}")
    print(f"{'server / runner':<24}{best['server'][0] / best['runner'][0]:>16.2f}"
          f"{best['server'][1] / best['runner'][1]:>14.2f}")


def schema_cost(path, args) -> None:
    model = runner.load(path, num_ctx=2048)
    prompt = model.apply_template([{"role": "user", "content": "A story as JSON."}])
    rates = {"unconstrained": [], "json schema": []}
    for _ in range(args.repeat):
        for label, fmt in (("unconstrained", None), ("json schema", SCHEMA)):
            model.generate(prompt, stream=False, format=fmt, temperature=0.7, seed=1,
                           num_predict=args.num_predict)
            rates[label].append(model.last.eval_count / model.last.eval_duration * 1e9)
    model.close()
    print(f"\n{'':<24}{'decode tok/s':>14}")
    for label, values in rates.items():
        print(f"{label:<24}{max(values):>14.1f}")
    ratio = max(rates['json schema']) / max(rates['unconstrained'])
    print(f"{'schema / unconstrained':<24}{ratio:>14.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2:135m")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--num-predict", type=int, default=128)
    args = parser.parse_args()
    path = store.pull(args.model, progress=False) if args.model in store.CATALOG \
        else store.resolve(args.model)
    overhead(path, args)
    schema_cost(path, args)


if __name__ == "__main__":
    main()
