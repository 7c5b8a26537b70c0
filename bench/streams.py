"""Parallel greedy streams through the batch loop, in process: the tokens/s that n requests
submitted together generate in all, beside one alone (a server's --parallel n, without HTTP).

    python bench/streams.py [--model smollm2:135m ...] [--streams 1,2,4,8] [--prompt 64]
        [--generate 128] [--threads 2] [--repeat 3] [--flash] [--num-gpu 99] [--rpc HOST:PORT]

Each run loads the model with --parallel n slots, warms up with one short request, then
submits n requests of --prompt tokens each (other tokens per stream, so that none reuses
another's cache) and times from the first stream's first token to the last stream's end:
generation alone, as the decode steps of n sequences at once. Best of --repeat. On a GPU a
decode step of a few sequences costs about what one costs, so 4 streams should give well
over 2.5 times one stream's tokens/s; on a CPU the products are bound by the weights'
bandwidth too, until the batch grows.
"""

from __future__ import annotations

import argparse
import queue
import time

from engines import model_path, token_ids

import runner
from runner.api import split_options
from runner.engine.request import Request
from runner.loading import store
from runner.loading.devices import add_device_flags, device_options


def aggregate(model, prompts: list[list[int]], generate: int) -> float:
    """Tokens/s of greedy requests for prompts submitted together, generation alone."""
    sampling, limits = split_options({"temperature": 0, "num_predict": generate})
    events = queue.Queue()
    requests = [Request(prompt, lambda event: events.put((time.perf_counter(), event)),
                        sampling, limits) for prompt in prompts]
    model.engine.submit(*requests)
    first_token, finished, generated = None, 0, 0
    while finished < len(prompts):
        now, event = events.get()
        if "error" in event:
            raise RuntimeError(f"A stream failed: {event['error']}")
        if first_token is None and "content" in event:
            first_token = now
        if event.get("done"):
            finished, generated, last = finished + 1, generated + event["eval_count"], now
    return generated / (last - first_token)


def prompts(path, streams: int, n: int, seed: int) -> list[list[int]]:
    """Prompts of n tokens, one a stream, none sharing another's cache."""
    return [token_ids(path, n, seed=seed * 100 + i) for i in range(streams)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="a model name or GGUF path "
                        "(default: every catalog model)")
    parser.add_argument("--streams", default="1,2,4,8")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--generate", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--flash", action="store_true")
    add_device_flags(parser)
    args = parser.parse_args()
    devices = device_options(args)
    counts = [int(n) for n in args.streams.split(",")]
    print(f"greedy streams at once, generation tokens/s in all (best of {args.repeat}; "
          f"flash {'on' if args.flash else 'off'}, {args.threads} threads)")
    print(f"{'model':<24}" + "".join(f"{f'{n} streams':>12}{'x 1':>6}" for n in counts))
    for name in args.model or store.CATALOG:
        path = model_path(name)
        row, single = f"{str(name)[-24:]:<24}", None
        for streams in counts:
            model = runner.load(path, num_ctx=(args.prompt + args.generate + 16) * streams,
                                parallel=streams, threads=args.threads, flash_attn=args.flash,
                                **vars(devices))
            try:
                aggregate(model, prompts(path, 1, 8, seed=99), 8)                     # warm up
                best = max(aggregate(model, prompts(path, streams, args.prompt, run),
                                     args.generate) for run in range(args.repeat))
            finally:
                model.close()
            single = single or best
            row += f"{best:>12.1f}{best / single:>6.2f}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
