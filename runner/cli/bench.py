"""`python -m runner bench MODEL`: speed as a server's clients see it.

Prompts of --prompt-tokens tokens (words calibrated against the model's own tokenizer by a
first request's prompt_eval_count), each starting differently so that no prompt cache helps,
sent --parallel at a time; each generates --num-predict tokens. Per concurrency: prefill and
decode tokens/s as the server measured them (means over the requests), the time to the first
token as the client saw it, and the aggregate decode rate (all generated tokens over the
wall time). The server must allow the concurrency (RUNNER_NUM_PARALLEL), else requests wait.
"""

from __future__ import annotations

import statistics
import threading
import time

from .client import Client, print_table

WORDS = ("the history of science is a story of people who asked how the world works and "
         "found answers by looking closely measuring carefully and sharing what they learned "
         "with others across many years and places").split()


def prompt(words: int, salt: int) -> str:
    text = [WORDS[i % len(WORDS)] for i in range(words)]
    return f"Note {salt}: " + " ".join(text)


def one(client: Client, model: str, text: str, options: dict) -> dict:
    started, first = time.perf_counter(), None
    done = {}
    for chunk in client.stream("/api/generate", {"model": model, "prompt": text, "raw": True,
                                                 "options": options}):
        if first is None and chunk.get("response"):
            first = time.perf_counter()
        if chunk.get("done"):
            done = chunk
    done["ttft"] = (first or time.perf_counter()) - started
    return done


def rate(reply: dict, kind: str) -> float:
    """Tokens per second of a reply's prompt_eval or eval (Ollama's counts and nanoseconds)."""
    return reply[f"{kind}_count"] / reply[f"{kind}_duration"] * 1e9


def run(args) -> int:
    client = Client(None if not args.host else
                    args.host if "://" in args.host else f"http://{args.host}")
    options = {"num_predict": args.num_predict, "temperature": 0}
    if args.num_ctx:
        options["num_ctx"] = args.num_ctx
    calibration = one(client, args.model, prompt(200, 0), dict(options, num_predict=1))
    per_word = calibration["prompt_eval_count"] / 203
    words = max(1, round((args.prompt_tokens - 3) / per_word))
    one(client, args.model, prompt(words, 1), options)                    # warm up
    rows, salt = [], 2
    for parallel in args.parallel:
        results: list[dict] = []
        threads: list[threading.Thread] = []
        for _ in range(parallel):
            text = prompt(words, salt)
            salt += 1
            threads.append(threading.Thread(
                target=lambda t=text, into=results: into.append(one(client, args.model, t,
                                                                    options))))
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
        rows.append([
            str(parallel), f"{statistics.mean(r['prompt_eval_count'] for r in results):.0f}",
            f"{statistics.mean(rate(r, 'prompt_eval') for r in results):.1f}",
            f"{statistics.mean(rate(r, 'eval') for r in results):.1f}",
            f"{sum(r['eval_count'] for r in results) / wall:.1f}",
            f"{statistics.median(r['ttft'] for r in results) * 1e3:.0f}"])
    print(f"{args.model}: prompts of ~{args.prompt_tokens} tokens, {args.num_predict} generated")
    print_table(rows, ["parallel", "prompt tokens", "prefill tok/s", "decode tok/s",
                       "aggregate tok/s", "first token ms"])
    return 0


def add_parser(sub) -> None:
    bench = sub.add_parser("bench", help="measure a running server: prefill, decode, "
                           "first token, aggregate at a concurrency")
    bench.add_argument("model")
    bench.add_argument("--prompt-tokens", type=int, default=512)
    bench.add_argument("--num-predict", type=int, default=128)
    bench.add_argument("--parallel", type=lambda t: [int(p) for p in t.split(",")],
                       default=[1], help="concurrent requests, e.g. 1,4")
    bench.add_argument("--num-ctx", type=int)
    bench.add_argument("--host", help="the server (default RUNNER_HOST or 127.0.0.1:11434)")
    bench.set_defaults(run=run)
