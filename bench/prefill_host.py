"""Where a prompt step's time goes on the host, phase by phase: building its graph in
Python, computing its cache inputs (slots, masks), the scheduler's allocation, filling the
inputs, the launch, the compute itself, and reading the last row's logits. A prompt's graph
is new (its shape differs from the last step's), so nothing is reused or overlapped here:
this is what a lone prompt pays before its first token.

    python bench/prefill_host.py [--prompt 500] [--threads 2] [--repeat 5] [--flash]
        [--device CUDA0] [--model NAME_OR_PATH ...]

--device puts every layer on that device (as `python -m pyggml` lists it). Medians in
milliseconds, printed as a table.
"""

from __future__ import annotations

import argparse
import statistics
import time

from engines import Ours, model_path, token_ids
from runner.batch import Batch

PHASES = ("build", "cache inputs", "alloc", "fill", "launch", "compute", "read")


def phases(engine: Ours, tokens: list[int]) -> dict[str, float]:
    """Milliseconds of each phase of one prompt step from an empty cache."""
    executor, kv = engine.executor, engine.kv
    kv.remove(0, 0)
    executor.forget()
    batch = Batch.of_sequence(tokens, 0)
    kv.start(batch)
    marks = [time.perf_counter()]
    step = executor._build(batch, (len(batch), len(batch.outputs), kv.n_kv, False, 0, False))
    marks.append(time.perf_counter())
    step.kv_inputs.prepare(kv.current)
    marks.append(time.perf_counter())
    executor.scheduler.alloc(step.graph)
    marks.append(time.perf_counter())
    for tensor, values in ((step.inputs.tokens, batch.tokens),
                           (step.inputs.positions, batch.positions),
                           (step.inputs.outputs, batch.outputs)):
        tensor.set(values)
    step.kv_inputs.feed()
    marks.append(time.perf_counter())
    computation = executor.scheduler.compute_async(step.graph)
    marks.append(time.perf_counter())
    computation.wait()
    marks.append(time.perf_counter())
    step.logits.numpy(copy=True)
    marks.append(time.perf_counter())
    step.ctx.close()
    return {name: (b - a) * 1e3 for name, a, b in zip(PHASES, marks, marks[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=500)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--flash", action="store_true")
    parser.add_argument("--device", default=None)
    parser.add_argument("--model", nargs="+", default=["smollm2:135m", "gemma3:270m"])
    args = parser.parse_args()
    print(f"| model | {' | '.join(PHASES)} | host share |")
    print("|" + " --- |" * (len(PHASES) + 2))
    for name in args.model:
        path = model_path(name)
        engine = Ours(path, args.threads, args.flash, repack=args.device is None,
                      cells=max(512, args.prompt + 256), device=args.device)
        tokens = token_ids(path, args.prompt)
        phases(engine, tokens)                                        # warm up
        runs = [phases(engine, tokens) for _ in range(args.repeat)]
        engine.close()
        median = {p: statistics.median(run[p] for run in runs) for p in PHASES}
        host = sum(median.values()) - median["compute"]
        print(f"| {name} | " + " | ".join(f"{median[p]:.2f}" for p in PHASES) +
              f" | {host / sum(median.values()):.1%} |")


if __name__ == "__main__":
    main()
