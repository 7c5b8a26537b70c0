"""KV cache memory with and without window caches, ours beside llama.cpp's (llama-cpp-python
0.3.36, `pip install '.[llamacpp]'`), for a model with sliding-window layers:

    python bench/window_cache.py [--model gemma3:270m-base] [--cells 4096 32768 131072]

Each figure is the size of the KV buffers as ggml allocated them: ours read off the
buffers, llama.cpp's from its log (`KV buffer size`), for one sequence, or for four
sharing the cells where they exceed the model's trained context (Gemma 3 270M: 32768; 131072
cells are 4 x 32768, llama.cpp's cache unified as ours is). "full" keeps every layer's cells
for the whole context (--swa-full in both).
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile

import runner
from runner.loading.loader import open_model

MIB = 1 << 20


def ours(path, cells: int, sequences: int, swa_full: bool) -> int:
    model = runner.load(path, num_ctx=cells // sequences, parallel=sequences, batch_size=512,
                        threads=2, swa_full=swa_full)
    try:
        return sum(buffer.size for buffer in model.kv.buffers)
    finally:
        model.close()


def llama_cpp(path, cells: int, sequences: int, swa_full: bool) -> int:
    import llama_cpp as lc

    lc.llama_backend_init()
    model = lc.llama_model_load_from_file(str(path).encode(), lc.llama_model_default_params())
    params = lc.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = cells, 512, 512
    params.n_seq_max, params.kv_unified, params.swa_full = sequences, True, swa_full
    with tempfile.TemporaryFile() as log:       # llama.cpp logs to the process's stderr
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            context = lc.llama_init_from_model(model, params)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        log.seek(0)
        text = log.read().decode(errors="replace")
    lc.llama_free(context)
    lc.llama_model_free(model)
    sizes = re.findall(r"KV buffer size =\s+([\d.]+) MiB", text)
    if not sizes:
        raise RuntimeError("llama.cpp logged no KV buffer size.")
    return int(sum(float(s) for s in sizes) * MIB)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma3:270m-base")
    parser.add_argument("--cells", type=int, nargs="+", default=[4096, 32768, 131072])
    args = parser.parse_args()
    opened = open_model(args.model, pull=True)
    path, trained = opened.path, opened.model.config.context
    opened.close()
    print(f"{'cells':>7} {'seqs':>4} {'ours':>9} {'llama.cpp':>9} {'ratio':>6} "
          f"{'ours full':>9} {'llama.cpp full':>14} {'ratio':>6} {'window/full':>11}")
    for cells in args.cells:
        sequences = max(1, -(-cells // trained))
        figures = [engine(path, cells, sequences, full) for full in (False, True)
                   for engine in (ours, llama_cpp)]
        window, theirs, full, theirs_full = (f / MIB for f in figures)
        print(f"{cells:>7} {sequences:>4} {window:>8.1f}M {theirs:>8.1f}M "
              f"{window / theirs:>6.3f} {full:>8.1f}M {theirs_full:>13.1f}M "
              f"{full / theirs_full:>6.3f} {window / full:>11.3f}")


if __name__ == "__main__":
    main()
