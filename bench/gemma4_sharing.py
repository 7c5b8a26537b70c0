"""What Gemma 4's KV-sharing layers save on a prompt: they write no cache, so only the rows
whose logits are wanted go through them (as transformers does), instead of every row.

    python bench/gemma4_sharing.py [--prompt 512] [--threads 2] [--repeat 3]

The model is a random Gemma 4 made with transformers (the test extra) and converted to f16:
20 layers, the last 10 sharing (E2B has 20 of 35), hidden 512, per-layer embeddings.
Each figure is the best of --repeat runs, the two ways alternating.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pyggml
from runner.convert import convert
from runner.engine.batch import Batch
from runner.engine.executor import Executor
from runner.kvcache import CausalCache
from runner.loading.loader import load_model
from runner.models.gemma4 import Gemma4


def make_model(directory: Path) -> Path:
    from tests.support.hf_tiny import FULL, SLIDING, checkpoint

    hf = checkpoint("gemma4", directory / "hf", hidden_size=512, intermediate_size=2048,
                    num_hidden_layers=20, layer_types=([SLIDING] * 4 + [FULL]) * 4,
                    num_kv_shared_layers=10, num_attention_heads=8, head_dim=64,
                    global_head_dim=128, hidden_size_per_layer_input=64)
    return convert(hf, directory / "f16.gguf", "f16", progress=False)


def prompt_seconds(model, backend, ids, output_rows_only: bool) -> float:
    Gemma4.sharing_layers_output_rows_only = output_rows_only
    kv = CausalCache(model.model.cache_layers(), 2 * len(ids), backend, "f16", True)
    executor = Executor(model.model, kv, pyggml.Scheduler([backend]))
    start = time.perf_counter()
    executor.logits(Batch.of_sequence(ids, 0))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    backend = pyggml.cpu_backend(threads=args.threads)
    with tempfile.TemporaryDirectory() as directory:
        model = load_model(make_model(Path(directory)), backend)
        ids = [5 + i % 590 for i in range(args.prompt)]
        best = {True: float("inf"), False: float("inf")}
        for _ in range(args.repeat):
            for rows_only in (False, True):
                best[rows_only] = min(best[rows_only],
                                      prompt_seconds(model, backend, ids, rows_only))
    print(f"| {args.prompt}-token prompt | ms | tokens/s |\n| --- | --- | --- |")
    for rows_only, label in ((False, "every row in every layer"),
                             (True, "output rows only in sharing layers")):
        print(f"| {label} | {best[rows_only] * 1000:.0f} | {args.prompt / best[rows_only]:.0f} |")
    print(f"\nspeed-up: {best[False] / best[True]:.2f}x")


if __name__ == "__main__":
    main()
