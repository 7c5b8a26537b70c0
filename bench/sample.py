"""Time per sampled token (top_k 40, temperature 0.8, top_p 0.9) at two vocabulary sizes,
from the whole vocabulary's logits and from the 64 largest a GPU or RPC device picks
(runner/executor.py's candidates: the same token, drawn from 64 logits instead of all).

    python bench/sample.py
"""

from __future__ import annotations

import time

import numpy as np

from runner.sample import Sampler, SamplingOptions


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{'vocab':>8}  {'setting':<28} {'ms/token':>9}")
    for vocab in (49152, 262144):
        logits = rng.standard_normal(vocab).astype(np.float32) * 4
        history = rng.integers(0, vocab, 64).tolist()
        for label, options in [
            ("top_k 40 (default chain)", SamplingOptions(top_k=40, seed=1)),
            ("top_k 40 + repeat penalty", SamplingOptions(top_k=40, seed=1, repeat_penalty=1.1)),
            ("greedy", SamplingOptions(temperature=0)),
        ]:
            sampler = Sampler(options)
            n = 300
            start = time.perf_counter()
            for _ in range(n):
                sampler.sample(logits, history)
            print(f"{vocab:>8}  {label:<28} {(time.perf_counter() - start) / n * 1e3:>9.3f}")
        ids = rng.permutation(np.argpartition(logits, -64)[-64:]).astype(np.int32)
        values = logits[ids]
        sampler = Sampler(SamplingOptions(top_k=40, seed=1))
        n = 300
        start = time.perf_counter()
        for _ in range(n):
            sampler.sample_candidates(ids, values)
        label = "top_k 40 from 64 candidates"
        print(f"{vocab:>8}  {label:<28} {(time.perf_counter() - start) / n * 1e3:>9.3f}")


if __name__ == "__main__":
    main()
