"""One decode step of a model, timed node by node, ours beside llama.cpp's on the same file.

    python bench/profile.py [--model smollm2:135m] [--threads N] [--context 256]
        [--batch 1] [--flash] [--no-repack] [--repeat 20]

Both engines compute a step of --batch tokens (1: decoding; more: a prompt chunk) after a
prompt of --context tokens, on the CPU. First the whole step is timed (median of --repeat);
then each node is computed alone through ggml's eval callback (pyggml.profile; llama.cpp's
cb_eval, the same mechanism of the same ggml version), and the time per operation is shown
side by side, so that a gap is located by operation. Without llama-cpp-python installed
(`pip install '.[llamacpp]'`), only ours is shown.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import pyggml
from engines import engines, model_path, token_ids
from pyggml.profile import by_op


def timed(step, repeat: int) -> float:
    step()                                     # warm up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def profiled(step, engine, repeat: int) -> dict[str, tuple[int, float]]:
    """{op: (nodes per step, median seconds per step)}."""
    runs = []
    with engine.profiler() as clock:
        step()
        for _ in range(repeat):
            clock.clear()
            step()
            runs.append(by_op(clock.nodes))
    ops = {op for run in runs for op in run}
    return {op: (runs[-1].get(op, (0, 0))[0],
                 statistics.median(run.get(op, (0, 0.0))[1] for run in runs)) for op in ops}


def measure(cls, path, args, prompt, step_tokens):
    """(median seconds per step, {op: ...}): the step timed by an engine that watches no
    nodes (llama.cpp's node callback is a Python call per node), then profiled by one that
    does."""
    results = []
    for profile in (False, True):
        engine = cls(path, args.threads, args.flash, not args.no_repack,
                     len(prompt) + len(step_tokens) + 256, profile=profile)
        try:
            if prompt:
                engine.decode(prompt, 0)

            def step(engine=engine) -> None:
                engine.decode(step_tokens, len(prompt))
                engine.forget(len(prompt))

            results.append(profiled(step, engine, args.repeat) if profile
                           else timed(step, args.repeat))
        finally:
            engine.close()
    return tuple(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2:135m", help="a model name or GGUF path")
    parser.add_argument("--threads", type=int, default=pyggml.backend.default_threads())
    parser.add_argument("--context", type=int, default=256, help="tokens before the step")
    parser.add_argument("--batch", type=int, default=1, help="tokens in the step")
    parser.add_argument("--flash", action="store_true")
    parser.add_argument("--no-repack", action="store_true")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    path = model_path(args.model)
    prompt = token_ids(path, args.context)
    step_tokens = token_ids(path, args.batch, seed=1)
    results = {cls.name: measure(cls, path, args, prompt, step_tokens) for cls in engines()}
    names = list(results)
    print(f"{args.model}, {args.threads} threads, a step of {args.batch} token(s) after "
          f"{args.context}, flash {'on' if args.flash else 'off'}, repack "
          f"{'off' if args.no_repack else 'on'}; ms per step (medians of {args.repeat})")
    print(f"{'operation':<24}" + "".join(f"{'nodes':>7}{name + ' ms':>14}" for name in names)
          + (f"{'ratio':>8}" if len(names) == 2 else ""))
    ops = defaultdict(dict)
    for name in names:
        for op, value in results[name][1].items():
            ops[op][name] = value
    for op, values in sorted(ops.items(), key=lambda kv: -max(v[1] for v in kv[1].values())):
        cells = [values.get(name, (0, 0.0)) for name in names]
        row = f"{op:<24}" + "".join(f"{count:>7}{seconds * 1e3:>14.3f}" for count, seconds in cells)
        if len(names) == 2 and cells[1][1] > 0:
            row += f"{cells[0][1] / cells[1][1]:>8.2f}"
        print(row)
    print(f"{'all nodes, one by one':<24}" + "".join(
        f"{'':>7}{sum(v[1] for v in results[n][1].values()) * 1e3:>14.3f}" for n in names))
    whole = [results[n][0] for n in names]
    print(f"{'whole step':<24}" + "".join(f"{'':>7}{w * 1e3:>14.3f}" for w in whole)
          + (f"{whole[0] / whole[1]:>8.2f}" if len(names) == 2 else ""))


if __name__ == "__main__":
    main()
