"""Where a step's time goes on the host, phase by phase: building its graph in Python (or,
decoding, placing the token in the cache and taking the kept graph), computing its cache
inputs (slots, masks), the scheduler's allocation, filling the inputs, the launch, the
compute itself, and reading the logits. A prompt's graph is new (its shape differs from the
last step's), so nothing is reused or overlapped: this is what a lone prompt pays before its
first token. A second row ("reused") times the same prompt step again from an empty cache,
reusing the graph the first built (the shape held): what Python adds to a prompt step whose
shape recurs (llama-bench's repetitions, prompts of one length); a third ("kept") reuses it
after a decode step's graph ran in between, so that the scheduler allocates it anew, as the
executor's kept graphs are when their shape comes back. With --decode N, N single-token steps
follow the prompt, each reusing the kept graph and reading into one array as the batch loop
does, but with nothing overlapped: every phase but the compute is what Python adds to a
decode step (llama.cpp's whole step is its compute plus a little C++).

    python bench/prefill_host.py [--prompt 500] [--context N] [--decode N] [--threads 2]
        [--repeat 5] [--flash] [--device CUDA0] [--plain] [--inline]
        [--model NAME_OR_PATH ...]

--context N: the prompt (and the decode steps) come after N tokens of its sequence already
in the cache (filled once, by chunks of 512), so that its step sees N + prompt cells, as a
long conversation's next turn or a long prompt's later chunks do.

--device puts every layer on that device (as `python -m pyggml` lists it). Medians in
milliseconds (decoding: microseconds), printed as a table. --plain keeps the CPU's weights in
their file layout (llama-bench --repack 0); --inline computes on the calling thread instead of
the scheduler's C compute thread (whether that thread costs the compute anything: the launch
phase then holds the compute).
"""

from __future__ import annotations

import argparse
import statistics
import time

from engines import Ours, model_path, token_ids

from runner.engine.batch import Batch
from runner.engine.executor import Shape

PHASES = ("build", "cache inputs", "alloc", "fill", "launch", "compute", "read")


def timed_step(engine: Ours, batch: Batch, step=None) -> tuple[dict[str, float], object]:
    """(seconds of each phase, the step) of one step: a new graph, or step (the kept one)
    reused."""
    executor, kv = engine.executor, engine.kv
    marks = [time.perf_counter()]
    kv.start(batch)
    if step is None:
        step = executor._build(batch, Shape(len(batch), len(batch.outputs), kv.current.shape, False,
                                            0, False, False))
    step.batch = batch
    marks.append(time.perf_counter())
    step.kv_inputs.prepare(kv.current)
    marks.append(time.perf_counter())
    executor.scheduler.alloc(step.graph)
    marks.append(time.perf_counter())
    for tensor, values in ((step.token_input, batch.tokens),
                           (step.inputs.positions, batch.positions),
                           (step.inputs.outputs, batch.outputs)):
        tensor.set(values)
    step.kv_inputs.feed()
    marks.append(time.perf_counter())
    computation = executor.scheduler.compute_async(step.graph)
    marks.append(time.perf_counter())
    computation.wait()
    marks.append(time.perf_counter())
    executor._read_reused(step.logits, "logits")
    marks.append(time.perf_counter())
    return dict(zip(PHASES, (b - a for a, b in zip(marks, marks[1:])))), step


def fill(engine: Ours, tokens: list[int]) -> None:
    """Put tokens in sequence 0 of the empty cache, by chunks of 512."""
    engine.kv.remove(0, 0)
    for start in range(0, len(tokens), 512):
        engine.decode(tokens[start:start + 512], start)
    engine.executor.forget()


def prompt_phases(engine: Ours, tokens: list[int], graph: str,
                  context: int = 0) -> dict[str, float]:
    """Milliseconds of each phase of one prompt step after context tokens in the cache, its
    graph: "new"; "reused", the graph of a step of the same shape just before; "kept", that
    graph after a decode step's graph was allocated and computed in between (so it is
    allocated anew, as the executor's kept graphs are)."""
    engine.kv.remove(0, context)
    engine.executor.forget()
    kept = None
    if graph != "new":
        _, kept = timed_step(engine, Batch.of_sequence(tokens, context))
    if graph == "kept":
        _, other = timed_step(engine, Batch.of_sequence(tokens[:1], context + len(tokens)))
        other.ctx.close()
    engine.kv.remove(0, context)
    seconds, step = timed_step(engine, Batch.of_sequence(tokens, context), kept)
    step.ctx.close()
    return {name: value * 1e3 for name, value in seconds.items()}


def decode_phases(engine: Ours, tokens: list[int], steps: int,
                  context: int = 0) -> dict[str, float]:
    """Median microseconds of each phase over steps single-token steps after context tokens
    and then tokens. The batch is made inside the build phase, as the batch loop makes it
    each step."""
    engine.kv.remove(0, context)
    engine.executor.forget()
    _, step = timed_step(engine, Batch.of_sequence(tokens, context))
    step.ctx.close()
    runs, kept = [], None
    for position in range(context + len(tokens), context + len(tokens) + steps):
        start = time.perf_counter()
        batch = Batch.of_sequence([tokens[position % len(tokens)]], position)
        made = time.perf_counter() - start
        seconds, kept = timed_step(engine, batch, kept)
        seconds["build"] += made
        runs.append(seconds)
    kept.ctx.close()
    return {p: statistics.median(run[p] for run in runs) * 1e6 for p in PHASES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=500)
    parser.add_argument("--context", type=int, default=0,
                        help="tokens already in the cache before the prompt")
    parser.add_argument("--decode", type=int, default=0, metavar="N",
                        help="time N single-token steps after the prompt instead")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--flash", action="store_true")
    parser.add_argument("--device", default=None)
    parser.add_argument("--plain", action="store_true", help="no repacked CPU weights")
    parser.add_argument("--inline", action="store_true",
                        help="compute on this thread, not the scheduler's compute thread")
    parser.add_argument("--model", nargs="+", default=["smollm2:135m", "gemma3:270m-base"])
    args = parser.parse_args()
    unit = "us" if args.decode else "ms"
    print(f"| model | graph | {' | '.join(PHASES)} | host ({unit}) | host share |")
    print("|" + " --- |" * (len(PHASES) + 4))
    for name in args.model:
        path = model_path(name)
        engine = Ours(path, args.threads, args.flash,
                      repack=args.device is None and not args.plain,
                      cells=args.context + args.prompt + args.decode + 256,
                      device=args.device, inline=args.inline)
        tokens = token_ids(path, args.prompt)
        if args.context:
            fill(engine, token_ids(path, args.context, seed=1))
        if args.decode:
            decode_phases(engine, tokens, 8, args.context)            # warm up
            rows = {"kept": [decode_phases(engine, tokens, args.decode, args.context)
                             for _ in range(args.repeat)]}
        else:
            prompt_phases(engine, tokens, "new", args.context)        # warm up
            rows = {"new": [], "reused": [], "kept": []}
            for _ in range(args.repeat):                              # alternating
                for graph in rows:
                    rows[graph].append(prompt_phases(engine, tokens, graph, args.context))
        engine.close()
        for graph, runs in rows.items():
            median = {p: statistics.median(run[p] for run in runs) for p in PHASES}
            if args.inline:                     # the launch returned once the compute was done
                median["compute"] += median["launch"]
                median["launch"] = 0.0
            host = sum(median.values()) - median["compute"]
            shown = "{:.0f}" if args.decode else "{:.2f}"
            cells = [shown.format(median[p]) for p in PHASES] + [shown.format(host)]
            print(f"| {name} | {graph} | {' | '.join(cells)} | "
                  f"{host / sum(median.values()):.1%} |")


if __name__ == "__main__":
    main()
