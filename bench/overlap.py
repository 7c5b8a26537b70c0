"""The batch loop's ways of stepping on the CPU, side by side at one thread count: greedy
decode tokens/s of one request through each, in alternating rounds, and each one's ratio to
the runner's own choice.

    python bench/overlap.py [--model smollm2:135m] [--threads 2] [--generate 64]
        [--rounds 20]

Ways (the model is loaded once for each; every one gives the same tokens):
- "runner": what runner.load chooses at this thread count. With a CPU left beside ggml's
  threads it overlaps and chains greedy steps on the compute thread; with ggml's threads on
  every CPU it steps one after the other on the loop's own thread.
- "overlapped, chained" and "overlapped": as if a CPU were left over (the loop assembles
  the next step while one computes, on the scheduler's compute thread), chained and not.
- "one after the other": assembled after the last step's token is chosen (--no-overlap),
  computed on the loop's thread.
Where ggml's threads take every CPU, the overlapped ways run Python beside them.

Each run waits half a second first: an idle ggml thread pool spins for a while after its
last compute (up to a few hundred milliseconds), and a pool spinning on the CPUs slowed the
next model's run by 10-20% in rounds without the pause. Ratios are medians of each round's
ratio: the models of a round saw the same minute of a noisy machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack, contextmanager
from unittest import mock

from engines import greedy, model_path

import runner
import runner.api

WAYS = {"runner": {}, "overlapped, chained": {"spare": True},
        "overlapped": {"spare": True, "unchained": True},
        "one after the other": {"overlap": False}}


@contextmanager
def stepping(spare: bool = False, unchained: bool = False):
    """runner.load as if a CPU were left beside ggml's threads (spare), with no chaining
    (unchained)."""
    executor = runner.api.Executor
    with ExitStack() as patches:
        if spare:
            patches.enter_context(mock.patch.object(runner.api, "available_cpus",
                                                    lambda: 1 << 16))
        if unchained:
            patches.enter_context(mock.patch.object(
                runner.api, "Executor", lambda *args, **options: executor(
                    *args, **{**options, "chain_on": None, "choose_on_device": False})))
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2:135m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--generate", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    path = model_path(args.model)
    models, described = {}, {}
    try:
        for name, way in WAYS.items():
            with stepping(way.get("spare", False), way.get("unchained", False)):
                model = models[name] = runner.load(path, num_ctx=1024, threads=args.threads,
                                                   overlap=way.get("overlap", True))
            described[name] = (f"{'loop' if model.scheduler.inline else 'compute'} thread | "
                               f"{model.engine.overlap} | {model.executor.chains}")
            greedy(model, [1, 2, 3], 8)                                     # warm up
        speeds = {name: [] for name in models}
        names = list(models)
        for round_ in range(args.rounds):
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                time.sleep(0.5)                       # the last run's pool stops spinning
                done = greedy(models[name], [1, 2, 3, 4], args.generate)
                speeds[name].append(done["eval_count"] / done["eval_duration"] * 1e9)
    finally:
        for model in models.values():
            model.close()
    print(f"{path.name}, {args.threads} threads, tg{args.generate}, greedy, medians of "
          f"{args.rounds} rounds")
    print("| way | computes on | overlaps | chains | tok/s | ratio to runner |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, found in speeds.items():
        ratio = statistics.median(b / a for a, b in zip(speeds["runner"], found))
        print(f"| {name} | {described[name]} | {statistics.median(found):.1f} | {ratio:.3f} |")

if __name__ == "__main__":
    main()
