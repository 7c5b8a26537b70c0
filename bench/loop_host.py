"""Where a decode step's host time goes inside the batch loop, and what of it lies between
two computes: each loop phase is timed around its method (medians per step, us) over one
greedy request, with steps chained on the device and not, runs alternating.

    python bench/loop_host.py [--model smollm2:135m] [--threads 2] [--generate 128]
        [--rounds 3] [--num-ctx 1024] [--parallel 1] [--num-gpu N] [--rpc HOST:PORT]
        [--tensor-split 3,1] [--streams N]

Phases: "wait" (for the compute, inside finish), "read" (the rest of finish: the logits,
the device's choices), "choose" (the samplers), "launch" (inputs, the start of the compute;
chained, it returns once the device has finished the last step, so it includes that wait),
"handed on" (chained: reading the tokens back), "record" (streaming, while the next step
computes), "assemble" (the next batch and its graph, while the last one computes; "place"
is its part that takes the batch's cache cells). Chaining
applies on GPUs and RPC servers, and on the CPU where a CPU is left beside ggml's threads;
elsewhere both rows are the same. With ggml's threads on every CPU, a step computes on the
loop's thread: "launch" then holds the compute, and "python" its share of it.
Over RPC the wait shows in "read": the device's synchronize returns before the compute ends.
"python" is the loop thread's CPU time per iteration (a step): all it adds to a step, the
overlapped phases included, and steadier than the phases' clock times on a busy machine.
--streams N: N greedy requests at once (in N slots), a step holding a token of each; tok/s
is then theirs in all.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

from engines import greedy, model_path
from streams import aggregate, prompts

import runner
import runner.engine.executor
from runner.engine import loop
from runner.engine.request import Active
from runner.kvcache import CausalCache
from runner.loading.devices import add_device_flags, device_options

PHASES = {"wait": None, "read": None, "choose": (Active, "choose"),
          "launch": (loop.Engine, "_launch"),
          "handed on": (runner.engine.executor.Executor, "handed_on"),
          "record": (loop.Engine, "_record"), "assemble": (loop.Engine, "_assemble"),
          "place": (CausalCache, "start"), "python": None}


def timed(times: dict) -> None:
    """Wrap each phase's method to add its durations to times[phase]."""
    for phase, where in PHASES.items():
        if where is not None:
            cls, name = where
            setattr(cls, name, _timer(getattr(cls, name), times, phase))
    finish = runner.engine.executor.Executor.finish

    def split_finish(self, step, *args, **options):
        start = time.perf_counter()
        step.computation.wait()
        waited = time.perf_counter()
        result = finish(self, step, *args, **options)
        times["wait"].append(waited - start)
        times["read"].append(time.perf_counter() - waited)
        return result
    runner.engine.executor.Executor.finish = split_finish
    iterate = loop.Engine._iterate

    def cpu_timed(self):
        start = time.thread_time()
        iterate(self)
        times["python"].append(time.thread_time() - start)
    loop.Engine._iterate = cpu_timed


def _timer(method, times: dict, phase: str):
    def measured(*args, **options):
        start = time.perf_counter()
        result = method(*args, **options)
        times[phase].append(time.perf_counter() - start)
        return result
    return measured


def generate(model, prompt: list[list[int]], n: int) -> float:
    """Tokens/s of greedy requests at once through the batch loop (one: its own measure),
    once it is idle again."""
    if len(prompt) == 1:
        done = greedy(model, prompt[0], n)
        speed = done["eval_count"] / done["eval_duration"] * 1e9
    else:
        speed = aggregate(model, prompt, n)
    while model.engine.in_flight is not None or model.engine.active:
        time.sleep(0.01)
    return speed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2:135m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--generate", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-ctx", type=int, default=1024, help="cells of each sequence")
    parser.add_argument("--parallel", type=int, default=1,
                        help="slots sharing the cache (each request takes one)")
    parser.add_argument("--streams", type=int, default=1, help="greedy requests at once")
    add_device_flags(parser)
    args = parser.parse_args()
    path = model_path(args.model)
    parallel = max(args.parallel, args.streams)
    model = runner.load(path, num_ctx=args.num_ctx, parallel=parallel,
                        threads=args.threads,
                        **vars(device_options(args)))
    chain = model.executor._chain              # taken away for the unchained runs
    times = collections.defaultdict(list)
    timed(times)
    prompt = prompts(path, args.streams, 64, seed=0)
    generate(model, prompt, 8)                                            # warm up
    runs = {True: collections.defaultdict(list), False: collections.defaultdict(list)}
    for round_ in range(args.rounds):
        for chained in ((True, False) if round_ % 2 == 0 else (False, True)):
            model.executor._chain = chain if chained else None
            model.executor.forget()
            times.clear()
            runs[chained]["tok/s"].append(generate(model, prompt, args.generate))
            for phase in PHASES:
                runs[chained][phase].append(statistics.median(times[phase] or [0.0]) * 1e6)
    model.executor._chain = chain
    model.close()
    print(f"{path.name}, {args.threads} threads, tg{args.generate}, {args.num_ctx} x "
          f"{parallel} cells, {args.streams} streams, medians of {args.rounds} rounds; "
          f"chains: {chain is not None}")
    print(f"| steps | tok/s | {' | '.join(PHASES)} |")
    print("|" + " --- |" * (len(PHASES) + 2))
    for chained, found in runs.items():
        cells = [f"{statistics.median(found[p]):.0f}" for p in PHASES]
        print(f"| {'chained' if chained else 'unchained'} | "
              f"{statistics.median(found['tok/s']):.1f} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
