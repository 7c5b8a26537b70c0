"""One request at a time through a cache of several slots, as a server with --parallel N
serves one user: its generation tokens/s by the slot it took, once the other slots hold
earlier conversations' cells (a new prompt takes the least recently used slot, so they
all fill). Each slot has a home region of the cache, num_ctx cells from slot x num_ctx.

    python bench/slots.py [--model smollm2:135m] [--parallel 4] [--num-ctx 8192]
        [--requests 12] [--generate 128] [--threads 2] [--flash] [--num-gpu N]
        [--pairs 0:1,0:2,0:3,1:3 [--repeat 3]]

A step's graph sees the cells from its sequences' first to their last, in blocks of 256
(kvcache/cells.py): a lone request sees its own region whichever slot it is in. Before,
it saw every cell up to the last used one in the cache, the other slots' kept cells
masked: the last slot's request attended (parallel - 1) x num_ctx cells more.

--pairs: two users at once, as a server sees them once requests come and go (a new prompt
takes the least recently used slot, so two active requests hold any two slots). Every slot
first holds a conversation; then for each pair of slots, two requests that continue those
slots' conversations (so each takes its slot) are submitted together: their generation
tokens/s in all (best of --repeat; 0:1:3 runs three). Decode steps of several sequences
attend in streams, each its own region, a group of evenly spaced slots at a time; before,
only slots in a row did, and slots 0 and 3 attended the whole span between them.
"""

from __future__ import annotations

import argparse
import statistics

from engines import greedy, model_path, token_ids
from streams import aggregate

import runner
from runner.loading.devices import add_device_flags, device_options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2:135m")
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--num-ctx", type=int, default=8192)
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--generate", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--flash", action="store_true")
    parser.add_argument("--pairs", help="slot sets, as 0:1,0:3 (requests at once)")
    parser.add_argument("--repeat", type=int, default=3)
    add_device_flags(parser)
    args = parser.parse_args()
    path = model_path(args.model)
    model = runner.load(path, num_ctx=args.num_ctx, parallel=args.parallel,
                        threads=args.threads, flash_attn=args.flash,
                        **vars(device_options(args)))
    print(f"{path.name}, {args.parallel} slots of {args.num_ctx} cells, flash attention "
          f"{'on' if args.flash else 'off'}, {args.threads} threads")
    if args.pairs:
        try:
            pairs(model, path, args)
        finally:
            model.close()
        return
    by_slot: dict[int, list[float]] = {}
    try:
        for request in range(args.requests):
            prompt = token_ids(path, args.prompt, seed=request + 1)     # none shares a prefix
            done = greedy(model, prompt, args.generate)
            slot = next(s.id for s in model.engine.cache.slots if s.tokens[:len(prompt)] == prompt)
            by_slot.setdefault(slot, []).append(done["eval_count"] / done["eval_duration"] * 1e9)
    finally:
        model.close()
    print("generation tokens/s (median of each slot's requests)")
    print("| slot | " + " | ".join(map(str, sorted(by_slot))) + " |")
    print("|" + " --- |" * (len(by_slot) + 1))
    print("| tokens/s | " + " | ".join(f"{statistics.median(by_slot[s]):.1f}"
                                       for s in sorted(by_slot)) + " |")


def pairs(model, path, args) -> None:
    """Two requests at once in each pair of slots, every slot holding a conversation."""
    held = {}
    for request in range(args.parallel):                # each takes the next empty slot
        prompt = token_ids(path, args.prompt, seed=request + 1)
        greedy(model, prompt, args.generate)
        held[next(s.id for s in model.engine.cache.slots
                  if s.tokens[:len(prompt)] == prompt)] = prompt
    print("two requests at once, generation tokens/s in all (best of "
          f"{args.repeat})\n| slots | tokens/s |\n| --- | --- |")
    for pair in args.pairs.split(","):
        slots = [int(s) for s in pair.split(":")]
        best = 0.0
        for run in range(args.repeat):                  # a turn more of each conversation
            turns = [held[s] + token_ids(path, 8, seed=1000 + 10 * run + s) for s in slots]
            best = max(best, aggregate(model, turns, args.generate))
        print(f"| {' and '.join(map(str, slots))} | {best:.1f} |", flush=True)


if __name__ == "__main__":
    main()
