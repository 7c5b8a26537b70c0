"""Prompt and generation speed of both real models, flash attention off and on, with
llama.cpp (llama-cpp-python 0.3.36, `pip install '.[llamacpp]'`) side by side when it is
installed. Same prompt tokens, same thread count, one process after the other.

    python bench/generate.py [--prompt 500] [--generate 128] [--threads 2] [--repeat 3]
        [--model NAME_OR_PATH ...] [--num-gpu N] [--rpc HOST:PORT] [--tensor-split 3,1]

Layers go where the device flags say (as `run` takes them; llama.cpp gets n_gpu_layers and
tensor_split from the same flags): `--num-gpu 99` offloads everything to a GPU. With `--rpc`
llama.cpp is left out: llama-cpp-python takes no RPC servers (an unknown keyword is ignored,
and it computed on the CPU); `llama-bench --rpc` compares there.

Each figure is the best of --repeat runs, ours and llama.cpp alternating: the machines
here are shared and single runs drift by 20%. Each run first warms up with a prompt as long
as the measured one (other tokens), as llama-bench warms up with the test itself: a GPU's
first large batch loads kernels, creates its BLAS handle and grows its memory pool.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from engines import greedy, token_ids

import runner
from runner.loading import store
from runner.loading.devices import add_device_flags, device_options


def ours(path, prompt, warm, n_gen, threads, flash, devices) -> tuple[float, float]:
    """Through the batch loop, as every request runs (greedy; the prompt not cached)."""
    model = runner.load(path, num_ctx=1024, threads=threads, flash_attn=flash, **vars(devices))
    for tokens, n in ((warm, 8), (prompt, n_gen)):                      # warm up, measure
        done = greedy(model, tokens, n)
    model.close()
    # eval_duration starts at the first token, which the prompt's step chose: it spans
    # eval_count - 1 decode steps (llama.cpp's column times n_gen of them)
    return (done["prompt_eval_count"] / done["prompt_eval_duration"] * 1e9,
            (done["eval_count"] - 1) / done["eval_duration"] * 1e9)


def llama_cpp(path, prompt, warm, n_gen, threads, flash,
              devices) -> tuple[float, float] | None:
    try:
        import llama_cpp
        from llama_cpp import Llama
    except ImportError:
        return None
    if devices.rpc:                     # not llama-cpp-python's to take (see above)
        return None
    offload = {"n_gpu_layers": 999 if devices.num_gpu < 0 else devices.num_gpu}
    if devices.tensor_split:
        offload["tensor_split"] = list(devices.tensor_split)
    llm = Llama(model_path=str(path), n_ctx=1024, n_threads=threads, n_batch=512,
                flash_attn=flash, verbose=False, **offload)
    llm.eval(warm)
    llm.reset()
    start = time.perf_counter()
    llm.eval(prompt)
    prefill = len(prompt) / (time.perf_counter() - start)
    vocab = llm.n_vocab()

    def last_logits():
        ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(vocab,))

    start = time.perf_counter()
    for _ in range(n_gen):
        llm.eval([int(np.argmax(last_logits()))])
    return prefill, n_gen / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=500)
    parser.add_argument("--generate", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--model", action="append", help="a model name or GGUF path "
                        "(default: every catalog model)")
    add_device_flags(parser)
    args = parser.parse_args()
    devices = device_options(args)
    if devices.rpc:
        print("llama.cpp left out: llama-cpp-python takes no RPC servers")
    print(f"{'model':<14}{'flash':<7}{'ours pp':>9}{'llama pp':>10}{'ratio':>7}"
          f"{'ours tg':>9}{'llama tg':>10}{'ratio':>7}   (tokens/s)")
    for name in args.model or store.CATALOG:
        path = store.resolve(name) if args.model else store.pull(name, progress=False)
        prompt = token_ids(path, args.prompt)
        warm = token_ids(path, args.prompt, seed=1)
        warm[0] = prompt[0] + 1                            # no prefix of it in the cache
        for flash in (False, True):
            runs_ours, runs_ref = [], []
            for _ in range(args.repeat):
                runs_ours.append(ours(path, prompt, warm, args.generate, args.threads, flash,
                                      devices))
                runs_ref.append(llama_cpp(path, prompt, warm, args.generate, args.threads, flash,
                                          devices))
            o = tuple(max(run[i] for run in runs_ours) for i in (0, 1))
            r = None if runs_ref[0] is None else \
                tuple(max(run[i] for run in runs_ref) for i in (0, 1))
            ref = (f"{r[0]:>10.0f}{o[0] / r[0]:>7.2f}" if r else f"{'-':>10}{'-':>7}",
                   f"{r[1]:>10.1f}{o[1] / r[1]:>7.2f}" if r else f"{'-':>10}{'-':>7}")
            print(f"{str(name)[-14:]:<14}{'on' if flash else 'off':<7}{o[0]:>9.0f}{ref[0]}"
                  f"{o[1]:>9.1f}{ref[1]}")


if __name__ == "__main__":
    main()
