"""How far parallel decoding strays from decoding alone, flash attention off and on.

    python bench/determinism.py [--model smollm2:135m] [--tokens 40]

Prints, per flash setting: the largest logit difference of one sequence's decode step in a
batch of four sequences against a batch of one, and for four greedy prompts run together
through the engine, at which generated token each first differs from its run alone.
"""

from __future__ import annotations

import argparse
import queue

import numpy as np

import runner
from runner.api import split_options
from runner.engine.batch import Batch
from runner.engine.loop import Engine
from runner.engine.request import Request

PROMPTS = ["The capital of France is", "Once upon a time", "def fib(n):",
           "The sky is blue because"]


def step_difference(model) -> float:
    executor, kv = model.executor, model.kv
    tokens = model.tokenize("The capital of France is Paris, and the capital of Spain", True)
    n = len(tokens)
    for seq in range(4):
        kv.remove(seq)
        executor.logits(Batch.of_sequence(tokens, 0, seq))
    together = executor.logits(Batch([42] * 4, [n] * 4, range(4), outputs=range(4)))
    kv.remove(0, n)
    alone = executor.logits(Batch.of_sequence([42], n, 0))[-1]
    for seq in range(4):
        kv.remove(seq)
    return float(np.abs(together - alone).max())


def greedy(model, prompts, tokens) -> list[list[int]]:
    for seq in range(4):
        model.kv.remove(seq)
    engine = Engine(model.executor, model.tokenizer, parallel=4)
    engine.start()
    streams = []
    for prompt in prompts:
        events = queue.Queue()
        sampling, options = split_options({"temperature": 0, "num_predict": tokens})
        engine.submit(Request(model.tokenize(prompt, True), events.put, sampling, options,
                              logprobs=True))
        streams.append(events)
    out = []
    for events in streams:
        ids = []
        while "done" not in (event := events.get()):
            ids += [e["token"] for e in event.get("logprobs", [])]
        out.append(ids)
    engine.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2:135m")
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--no-repack", action="store_true",
                        help="plain weight layouts (no repacked CPU kernels)")
    args = parser.parse_args()
    print(f"{'flash':<7}{'step max |logit diff|':>22}   first differing token of 4 streams")
    for flash in (False, True):
        model = runner.load(args.model, num_ctx=512, parallel=4, threads=2, flash_attn=flash,
                            repack=not args.no_repack)
        diff = step_difference(model)
        alone = [greedy(model, [p], args.tokens)[0] for p in PROMPTS]
        together = greedy(model, PROMPTS, args.tokens)
        first = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), None)
                 for x, y in zip(alone, together)]
        print(f"{'on' if flash else 'off':<7}{diff:>22.3f}   "
              + ", ".join("same" if f is None else f"token {f}" for f in first))
        model.close()


if __name__ == "__main__":
    main()
