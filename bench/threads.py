"""Decode and prompt speed at every thread count, repacked weights on and off, ours beside
llama.cpp on the same file: where the many-core gap shows, and whether more threads help.

    python bench/threads.py [--model smollm2:135m] [--threads 1,2,4,8,16] [--prompt 512]
        [--generate 64] [--repeat 3] [--rounds 1] [--flash] [--device CUDA0]
        [--llama-bench PATH] [--loop]

As llama-bench's pp512 and tg64: a prompt of --prompt tokens in one batch, then --generate
single-token steps, each from an empty cache, on the CPU; tokens/s, best of --repeat. The
thread counts default to 1, 2, 4, ... up to this machine's physical cores.
--device puts every layer on that device (a GPU: then the thread count is the CPU's, which
only feeds the GPU, and the table is llama-bench's -ngl 99).
--llama-bench PATH adds llama.cpp's own llama-bench binary (built from the same source:
`cmake --build BUILD --target llama-bench` in llama-cpp-python's vendor/llama.cpp), run at
each thread count right after ours, both repack settings: for machines where
llama-cpp-python is missing or cannot load, and the figure llama.cpp's users quote; the
ratios then compare with it.
--loop measures ours as requests run, through the batch loop (runner.load, greedy): the
prompt as one request's prompt_eval, and --generate decode steps of a request with a one-token
prompt, from an empty cache as llama-bench's tg; a prompt of that size first warms up, as
llama-bench's warm-up run does. The loop streams each token's text and
builds the next step's graph while a step computes, and on a device chains greedy steps (the
next is launched before the host reads the last): what users get. Without it each single
step is built, launched and read one after another (about 0.3 ms of Python a step on the
2-core CPU here), which no user-facing path does; it shows the compute and the host side
apart (bench/prefill_host.py --decode splits the host's part).
--rounds N measures every engine N times in turn at each thread count and prints medians,
and the ratios as the median of each round's ratio: on a shared machine whose speed drifts
by 10-20% between minutes, a round's engines see the same minute.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

import pyggml
import runner
from engines import Ours, engines, greedy, model_path, token_ids


def speeds(cls, path, threads: int, repack: bool, args) -> tuple[float, float]:
    """(prompt tokens/s, generated tokens/s), the best of args.repeat."""
    if args.loop and cls is Ours:
        return loop_speeds(path, threads, repack, args)
    engine = cls(path, threads, args.flash, repack, args.prompt + args.generate + 256,
                 args.device)
    tokens = token_ids(path, max(args.prompt, args.generate))
    prompt, generated = tokens[:args.prompt], tokens[:args.generate]
    best = [0.0, 0.0]
    try:
        engine.decode(prompt[:8], 0)                          # warm up
        engine.forget(0)
        for _ in range(args.repeat):
            start = time.perf_counter()
            engine.decode(prompt, 0)
            best[0] = max(best[0], args.prompt / (time.perf_counter() - start))
            engine.forget(0)
            start = time.perf_counter()
            for position, token in enumerate(generated):
                engine.decode([token], position)
            best[1] = max(best[1], args.generate / (time.perf_counter() - start))
            engine.forget(0)
    finally:
        engine.close()
    return best[0], best[1]


def loop_speeds(path, threads: int, repack: bool, args) -> tuple[float, float]:
    """speeds() through the batch loop: one request of the prompt (its prompt_eval), then
    one of a single token generating args.generate more (eval_count - 1 tokens over
    eval_duration, which starts at the first token: the decode steps; fewer than
    args.generate where the model chose an end-of-generation token first)."""
    layers = {"num_gpu": 0}
    if args.device:               # every layer there, as llama-bench -ngl 99
        with pyggml.GGUFFile(path) as f:
            blocks = f.metadata[f"{f.metadata['general.architecture']}.block_count"]
        layers = {"gpu_layers": {args.device: tuple(range(blocks + 1))}}
    model = runner.load(path, num_ctx=args.prompt + args.generate + 256, threads=threads,
                        flash_attn=args.flash, repack=repack, batch_size=max(args.prompt, 1),
                        **layers)
    tokens = token_ids(path, args.prompt + 2 * args.repeat + 1, seed=1)
    best = [0.0, 0.0]
    try:
        # warm up as llama-bench does: a prompt of the size measured (a device's first
        # graphs of a shape are slow: CUDA's kernels load, its graphs are captured), a
        # few decode steps
        greedy(model, [tokens[-1]] + tokens[:args.prompt - 1], 4)
        for i in range(args.repeat):
            # first tokens of their own each time: nothing of either is in the prompt cache
            done = greedy(model, [tokens[args.prompt + i]] + tokens[:args.prompt - 1], 1)
            best[0] = max(best[0], done["prompt_eval_count"] / done["prompt_eval_duration"])
            done = greedy(model, [tokens[args.prompt + args.repeat + i]], args.generate + 1)
            if done["eval_count"] > 1:
                best[1] = max(best[1], (done["eval_count"] - 1) / done["eval_duration"])
    finally:
        model.close()
    return best[0] * 1e9, best[1] * 1e9


def llama_bench(binary: str, path, threads: int, args) -> dict:
    """{repack: (prompt tokens/s, generated tokens/s)} from one llama-bench run at threads,
    both repack settings, the best of its args.repeat samples."""
    command = [binary, "-m", str(path), "-t", str(threads), "--repack", "1,0",
               "-p", str(args.prompt), "-n", str(args.generate), "-r", str(args.repeat),
               "-fa", "1" if args.flash else "0", "-ngl", "99" if args.device else "0",
               "-o", "jsonl"] + (["-dev", args.device] if args.device else [])
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"llama-bench failed with exit status {done.returncode}: "
                         f"{done.stderr.strip()[-2000:]}")
    found: dict[bool, list[float]] = {True: [0.0, 0.0], False: [0.0, 0.0]}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            test = json.loads(line)
            found[bool(test["repack"])][0 if test["n_prompt"] else 1] = max(test["samples_ts"])
    return {repack: tuple(value) for repack, value in found.items()}


def main() -> None:
    cores = pyggml.backend.default_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2:135m", help="a model name or GGUF path")
    parser.add_argument("--threads", help="comma-separated thread counts (default: powers of "
                        f"two up to {cores})")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--generate", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure every engine this many times in turn; medians")
    parser.add_argument("--flash", action="store_true")
    parser.add_argument("--device", help="a GPU to put every layer on (default: the CPU)")
    parser.add_argument("--llama-bench", help="llama.cpp's llama-bench binary, to compare with")
    parser.add_argument("--loop", action="store_true",
                        help="ours through the batch loop, as requests run")
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",")] if args.threads else \
        sorted({min(1 << i, cores) for i in range(cores.bit_length() + 1)})
    path = model_path(args.model)
    names = [cls.name for cls in engines()] + (["llama-bench"] if args.llama_bench else [])
    columns = [(name, repack) for repack in (True, False) for name in names]
    reference = "llama-bench" if args.llama_bench else "llama.cpp"
    ratios = "ours" in names and reference in names
    print(f"{args.model} on {args.device or 'the CPU'}, pp{args.prompt} / tg{args.generate} "
          "tokens/s, "
          f"ours {'through the batch loop' if args.loop else 'step by step'}, flash "
          f"{'on' if args.flash else 'off'}, best of {args.repeat}"
          + (f", medians of {args.rounds} rounds" if args.rounds > 1 else ""))
    print(f"{'threads':<9}" + "".join(f"{name + (' repack' if repack else ' plain'):>22}"
                                      for name, repack in columns)
          + ("".join(f"{'pp / tg ratio ' + ('repack' if r else 'plain'):>23}"
                     for r in (True, False)) if ratios else ""))
    for threads in counts:
        rounds = [measure_round(path, threads, args) for _ in range(args.rounds)]
        found = {key: tuple(statistics.median(r[key][i] for r in rounds) for i in (0, 1))
                 for key in rounds[0]}
        row = f"{threads:<9}" + "".join(f"{found[name, repack][0]:>12.0f} / "
                                        f"{found[name, repack][1]:>6.1f}"
                                        for name, repack in columns)
        if ratios:        # the median of each round's ratio: both engines saw that minute
            row += "".join(f"{ratio(rounds, reference, r, 0):>16.2f} / "
                           f"{ratio(rounds, reference, r, 1):.2f}" for r in (True, False))
        print(row, flush=True)


def measure_round(path, threads: int, args) -> dict:
    """{(engine, repack): (prompt tokens/s, generated tokens/s)} at threads, every engine
    once, one right after the other."""
    found = {(cls.name, repack): speeds(cls, path, threads, repack, args)
             for cls in engines() for repack in (True, False)}
    if args.llama_bench:            # right after ours: the same minute of a noisy machine
        found.update({("llama-bench", repack): value for repack, value in
                      llama_bench(args.llama_bench, path, threads, args).items()})
    return found


def ratio(rounds: list[dict], reference: str, repack: bool, which: int) -> float:
    """The median over rounds of ours / reference (which: 0 prompt, 1 generation)."""
    return statistics.median(r["ours", repack][which] / max(r[reference, repack][which], 1e-9)
                             for r in rounds)


if __name__ == "__main__":
    main()
