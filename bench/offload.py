"""Does a model compute on other devices what it computes on the CPU? A greedy continuation
with log-probabilities, every layer on the CPU against half and all of them offloaded
(where the device flags say, as `run` takes them), printed as a table (bench/generate.py
measures speed: log-probabilities cost time).

    python bench/offload.py [--model smollm2:135m ...] [--prompt 600] [--generate 64]
        [--flash] [--threads 4] [--rpc HOST:PORT] [--tensor-split 3,1] [--main-gpu I]
        [--projector MMPROJ --image FILE]

Another device's arithmetic is not the CPU's (other summation orders, fused kernels), so a
greedy continuation may part from the CPU's where two tokens were all but tied: the table
gives the tokens that agree before any parting, the largest difference in the chosen
tokens' log-probabilities up to there, and at the parting the CPU's own margin between its
first two tokens (small: a tie broken the other way; large: a real fault).
The CPU computes with plain (not repacked) weights, as the offloaded layers do.
"""

from __future__ import annotations

import argparse
import queue
from pathlib import Path

from engines import token_ids

import runner
from runner.api import split_options
from runner.engine.request import Request
from runner.loading import store
from runner.loading.devices import add_device_flags, device_options


def continuation(model, prompt, n: int) -> list[dict]:
    """The generated tokens' logprob entries, each with its top two."""
    sampling, generation = split_options({"temperature": 0, "num_predict": n})
    events, found = queue.Queue(), []
    model.engine.submit(Request(prompt, events.put, sampling, generation, logprobs=True,
                                top_logprobs=2))
    while not (event := events.get()).get("done"):
        if "error" in event:
            raise RuntimeError(f"The request failed: {event['error']}")
        found += event.get("logprobs", [])
    return found


def compare(reference: list[dict], found: list[dict]) -> tuple[int, float, float | None]:
    """(tokens agreeing before the first parting, largest logprob difference up to there,
    the reference's top-two margin where they part, or None)."""
    agree, worst = 0, 0.0
    for ref, got in zip(reference, found):
        if ref["token"] != got["token"]:
            top = ref["top_logprobs"]
            return agree, worst, top[0]["logprob"] - top[1]["logprob"]
        worst = max(worst, abs(ref["logprob"] - got["logprob"]))
        agree += 1
    return agree, worst, None


def layout(model) -> str:
    names = [d.name for d in model.placement.layers]
    runs = []
    for name in names:
        if runs and runs[-1][0] == name:
            runs[-1][1] += 1
        else:
            runs.append([name, 1])
    return " ".join(f"{name}x{count}" for name, count in runs)


HEADER = f"{'model':<20}{'layers':<28}{'agree':>8}{'max dlogp':>11}{'margin':>9}"


def compare_placements(path, name: str, prompt_length: int, generate: int, threads: int,
                       flash: bool, devices: dict, projector=None, image=None,
                       image_prompt: str = "[img-0]") -> None:
    """Print a row per placement: every layer on the CPU (the reference), half and all of
    them offloaded. With a projector and an image, the prompt is image_prompt with the image
    where its tag stands (encoded on the output layer's device); else prompt_length random
    token ids."""
    layers = runner.api.open_model(path).model.config.layers
    picture = Path(image).read_bytes() if image else None
    reference = None
    for num_gpu in (0, layers // 2, -1):
        model = runner.load(path, num_ctx=prompt_length + generate + 256, threads=threads,
                            flash_attn=flash, repack=False, projector=projector,
                            **{**devices, "num_gpu": num_gpu})
        try:
            prompt = model.prompt_items(image_prompt, [picture]) if picture else \
                token_ids(path, prompt_length)
            found = continuation(model, prompt, generate)
            where = layout(model)
        finally:
            model.close()
        reference = reference or found
        agree, worst, margin = compare(reference, found)
        print(f"{str(name)[-19:]:<20}{where[:27]:<28}{agree:>4}/{len(reference):<3}"
              f"{worst:>11.2e}{'-' if margin is None else f'{margin:.3f}':>9}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="a model name or GGUF path "
                        "(default: every catalog model)")
    parser.add_argument("--prompt", type=int, default=600)
    parser.add_argument("--generate", type=int, default=64)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--flash", action="store_true")
    parser.add_argument("--projector", help="the models' mmproj file (with --image)")
    parser.add_argument("--image", help="an image the prompt holds (with --projector)")
    add_device_flags(parser)
    args = parser.parse_args()
    devices = vars(device_options(args))
    print(HEADER)
    for name in args.model or store.CATALOG:
        path = store.resolve(name) if args.model else store.pull(name, progress=False)
        compare_placements(path, name, args.prompt, args.generate, args.threads, args.flash,
                           devices, args.projector, args.image)

if __name__ == "__main__":
    main()
