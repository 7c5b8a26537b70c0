"""Embedding speed of an embedding model, ours beside llama.cpp's (llama-cpp-python 0.3.36,
`pip install '.[llamacpp]'`), one text at a time as /api/embed's clients send them: the same
texts, the same thread count, tokenizing included, pooled vectors out.

    python bench/embed.py --model PATH [--texts 32] [--words 100] [--threads 2] [--repeat 3]

Each figure is the best of --repeat runs, ours and llama.cpp alternating (the machines here
are shared; single runs drift). Each run embeds one text first to warm up.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import runner

WORDS = ("the model reads each sentence and returns one vector for it so that similar "
         "meanings land near each other in the space search engines rank documents by "
         "distance between these vectors numbers like 1234 and names like Paris too").split()


def texts(n: int, words: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, words)) for _ in range(n)]


def ours(path, batch, threads) -> float:
    model = runner.load(path, num_ctx=512, batch_size=512, threads=threads)
    try:
        model.embed(batch[0])
        start = time.perf_counter()
        for text in batch:
            model.embed(text)
        return time.perf_counter() - start
    finally:
        model.close()


def llama_cpp(path, batch, threads) -> float:
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), embedding=True, n_ctx=512, n_batch=512,
                n_ubatch=512, n_threads=threads, n_threads_batch=threads, verbose=False)
    llm.embed(batch[0])
    start = time.perf_counter()
    for text in batch:
        llm.embed(text)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--texts", type=int, default=32)
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    batch = texts(args.texts, args.words)
    best = {"ours": float("inf"), "llama.cpp": float("inf")}
    for _ in range(args.repeat):
        best["ours"] = min(best["ours"], ours(args.model, batch, args.threads))
        best["llama.cpp"] = min(best["llama.cpp"], llama_cpp(args.model, batch, args.threads))
    rate = {name: args.texts / seconds for name, seconds in best.items()}
    print(f"| model | texts of {args.words} words | ours texts/s | llama.cpp texts/s | ratio |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| {args.model} | {args.texts} | {rate['ours']:.1f} | {rate['llama.cpp']:.1f} | "
          f"{rate['ours'] / rate['llama.cpp']:.2f} |")


if __name__ == "__main__":
    main()
