"""Our graph's decode step alone (the executor, no batch loop, no sampling) beside
llama-bench's tg, interleaved round by round: where generation is slower than llama.cpp's,
this tells the graph from the loop around it.

    python bench/decode_step.py --model TWIN.gguf --llama-bench PATH/llama-bench \\
        [--rounds 3] [--tokens 128] [--threads 2]

Both compute one token at a time after a one-token prompt, flash attention on, an f16 cache.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import time

import pyggml
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.kvcache import new_cache
from runner.loading.loader import load_model


def ours(path: str, tokens: int, threads: int) -> float:
    backend = pyggml.cpu_backend(threads=threads)
    model = load_model(path, backend)
    kv = new_cache(model.model.cache_layers(), tokens + 64, backend, "f16", True)
    executor = Executor(model.model, kv, pyggml.Scheduler([backend]))
    try:
        executor.logits(Batch.of_sequence([1], 0))
        started = time.perf_counter()
        for position in range(1, tokens + 1):
            executor.logits(Batch.of_sequence([5], position))
        return tokens / (time.perf_counter() - started)
    finally:
        model.close()


def llama_bench(binary: str, path: str, tokens: int, threads: int) -> float:
    out = subprocess.run([binary, "-m", path, "-t", str(threads), "-p", "0", "-n", str(tokens),
                          "-r", "1", "-fa", "1", "-o", "csv"], capture_output=True, text=True,
                         check=True).stdout
    (row,) = list(csv.DictReader(io.StringIO(out)))
    return float(row["avg_ts"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--llama-bench", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print("| round | ours (tok/s) | llama-bench (tok/s) | ratio |\n| --- | --- | --- | --- |")
    for round_ in range(1, args.rounds + 1):
        a = ours(args.model, args.tokens, args.threads)
        b = llama_bench(args.llama_bench, args.model, args.tokens, args.threads)
        print(f"| {round_} | {a:.1f} | {b:.1f} | {a / b:.2f} |")


if __name__ == "__main__":
    main()
