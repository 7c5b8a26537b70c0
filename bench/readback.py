"""What a decode step pays to bring its result home from the device that holds the logits:
a row of logits (the vocabulary in float32) against the one int32 of a greedy choice picked
on the device (runner/executor.py's choose_on_device), and against the 64 ids and logits a
top-k sampler draws from (two reads), into pinned memory where the device has it, as the
batch loop reads them.

    python bench/readback.py [--rpc HOST:PORT ...] [--vocab 49152,262144] [--repeat 300]

Every accelerator ggml lists is measured, and each RPC server given (without one, a server
is started on loopback for the run: the CPU behind it, the network stack in between).
Medians in microseconds, printed as a table.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import pyggml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.rpc_servers import rpc_server  # noqa: E402


def median_read(tensor: pyggml.Tensor, repeat: int) -> float:
    out = tensor.host_array()
    tensor.numpy(out=out)                              # warm up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        tensor.numpy(out=out)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(device: pyggml.Device, vocab: int, repeat: int) -> tuple[float, float, float]:
    backend = device.open()
    with pyggml.Context(max_tensors=4, graphs=0) as ctx:
        logits, choice = ctx.new_tensor("F32", (1, vocab)), ctx.new_tensor("I32", (1,))
        ids, values = ctx.new_tensor("I32", (1, 64)), ctx.new_tensor("F32", (1, 64, 1))
        ctx.allocate(backend)
        for tensor in (logits, choice, ids, values):
            tensor.set(np.zeros(tensor.shape, pyggml.dtypes.NUMPY_DTYPE[tensor.dtype]))
        found = (median_read(logits, repeat), median_read(choice, repeat),
                 median_read(ids, repeat) + median_read(values, repeat))
    backend.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpc", action="append", default=[])
    parser.add_argument("--vocab", default="49152,262144")
    parser.add_argument("--repeat", type=int, default=300)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        endpoints = args.rpc or [stack.enter_context(rpc_server(threads=1)).endpoint]
        devices = [d for d in pyggml.devices() if not d.is_cpu and d.backend != "RPC"]
        for endpoint in endpoints:
            devices += pyggml.rpc.connect(endpoint)
        print(f"{'device':28} {'vocab':>7} {'logits us':>10} {'choice us':>10} "
              f"{'64 candidates us':>17}")
        for device in devices:
            for vocab in (int(v) for v in args.vocab.split(",")):
                whole, one, candidates = measure(device, vocab, args.repeat)
                print(f"{device.name + ' ' + device.description[:20]:28} {vocab:7} "
                      f"{whole * 1e6:10.1f} {one * 1e6:10.1f} {candidates * 1e6:17.1f}")


if __name__ == "__main__":
    main()
