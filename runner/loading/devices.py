"""Which device computes each layer: the options that say so, the accelerators they name, and
the split of the repeating layers among them.

As in llama.cpp: the last num_gpu repeating layers go to the accelerators (local GPUs, then the
devices of RPC servers), the output layer goes with the last layer, and the token embeddings
stay on the CPU (see placement.py). Several accelerators share the offloaded layers in
proportion to tensor_split, or else to their free memory, in device order; main_gpu takes the
layers that rounding leaves over. num_gpu=-1 offloads as many layers as fit: the largest
count whose measured memory (weights, KV cache, compute graph) each accelerator holds with
HEADROOM to spare. Backends opens one backend per device as the layers need them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import pyggml

HEADROOM = 512 << 20          # per accelerator: its runtime's own allocations (CUDA context, ...)
ACCELERATOR_TYPES = ("gpu", "igpu")


@dataclass(frozen=True)
class DeviceOptions:
    num_gpu: int = -1                          # repeating layers on accelerators; -1: all that fit
    main_gpu: int | None = None                # index among the accelerators; default the first
    tensor_split: tuple[float, ...] | None = None    # proportions per accelerator
    rpc: tuple[str, ...] = ()                  # host:port of RPC servers whose devices join
    # explicit placement instead (a driver's /load GPULayers): {device id or name: layers},
    # layer len(blocks) being the output layer; unlisted layers stay on the CPU
    gpu_layers: dict[str, tuple[int, ...]] | None = None

    def __post_init__(self):
        if isinstance(self.num_gpu, bool) or not isinstance(self.num_gpu, int) or \
                self.num_gpu < -1:
            raise ValueError(f"num_gpu must be -1 (as many layers as fit), 0 (none) or a count "
                             f"of layers, not {self.num_gpu!r}.")
        if self.main_gpu is not None and (isinstance(self.main_gpu, bool) or
                                          not isinstance(self.main_gpu, int) or
                                          self.main_gpu < 0):
            raise ValueError(f"main_gpu must be the index of an accelerator (0, 1, ...), not "
                             f"{self.main_gpu!r}.")
        if self.tensor_split is not None:
            split = tuple(self.tensor_split)
            if not split or any(isinstance(s, bool) or not isinstance(s, (int, float)) or
                                not math.isfinite(s) or s < 0 for s in split) or sum(split) <= 0:
                raise ValueError(f"tensor_split must be non-negative proportions, one per "
                                 f"accelerator, not all zero: {self.tensor_split!r}.")
            object.__setattr__(self, "tensor_split", tuple(float(s) for s in split))
        endpoints = (self.rpc,) if isinstance(self.rpc, str) else tuple(self.rpc or ())
        for endpoint in endpoints:
            pyggml.rpc.parse_endpoint(endpoint)
        object.__setattr__(self, "rpc", endpoints)


def add_device_flags(parser) -> None:
    """The command line's names for DeviceOptions (llama.cpp's and Ollama's)."""
    parser.add_argument("--num-gpu", type=int, default=-1, help="repeating layers offloaded to "
                        "GPUs and RPC devices (-1: all that fit, 0: none)")
    parser.add_argument("--main-gpu", type=int, help="the accelerator that takes the layers "
                        "a split leaves over (an index among them)")
    parser.add_argument("--tensor-split", help="proportions of the offloaded layers per "
                        "accelerator, like 3,1 (default: by free memory)")
    parser.add_argument("--rpc", help="RPC servers whose devices take layers like GPUs, "
                        "host:port[,host:port...] (python -m pyggml rpc-server serves one)")


def device_options(args) -> DeviceOptions:
    return DeviceOptions(
        num_gpu=args.num_gpu, main_gpu=args.main_gpu,
        tensor_split=parse_tensor_split(args.tensor_split) if args.tensor_split else None,
        rpc=tuple(e for e in (args.rpc or "").split(",") if e))


def parse_tensor_split(text: str) -> tuple[float, ...]:
    """'3,1' (llama.cpp's --tensor-split form) -> (3.0, 1.0)."""
    try:
        return tuple(float(part) for part in text.replace("/", ",").split(","))
    except ValueError:
        raise ValueError(f"A tensor split is comma-separated proportions like 3,1, not "
                         f"{text!r}.") from None


def accelerators(options: DeviceOptions) -> list[pyggml.Device]:
    """The devices layers may be offloaded to: local GPUs, then the devices of the RPC
    servers the options name (not those another model of this process connected)."""
    local = [d for d in pyggml.devices() if d.type in ACCELERATOR_TYPES and d.endpoint is None]
    return local + [d for endpoint in options.rpc for d in pyggml.rpc.connect(endpoint)]


def split_layers(layers: int, count: int, shares: list[float],
                 main: int = 0) -> list[int | None]:
    """For each repeating layer, the index of the accelerator that computes it (None: the
    CPU): the last `count` layers, in contiguous runs per accelerator in proportion to
    shares; main takes what rounding leaves."""
    count = 0 if not shares or sum(shares) <= 0 else min(max(count, 0), layers)
    if not 0 <= main < max(len(shares), 1):
        raise ValueError(f"main_gpu {main} names no accelerator; there are {len(shares)}.")
    counts = [math.floor(count * share / sum(shares)) if count else 0 for share in shares]
    if count:
        counts[main] += count - sum(counts)
    plan: list[int | None] = [None] * (layers - count)
    for index, n in enumerate(counts):
        plan += [index] * n
    return plan


def offload(layers: int, gpus: list[pyggml.Device], options: DeviceOptions,
            need: Callable[[list[int | None]], dict[int, int]] | None = None) -> list[int | None]:
    """The accelerator index of each repeating layer (None: the CPU). need(plan) measures a
    candidate plan's memory per accelerator index; it is asked only for num_gpu=-1."""
    if not gpus or options.num_gpu == 0:
        return [None] * layers
    main = 0 if options.main_gpu is None else options.main_gpu
    if main >= len(gpus):
        raise ValueError(f"main_gpu {main} names no accelerator; this machine has "
                         f"{len(gpus)}: {', '.join(d.name for d in gpus)}.")
    shares = list(options.tensor_split or [d.memory_free for d in gpus])
    if len(shares) > len(gpus):
        raise ValueError(f"tensor_split gives {len(shares)} proportions for {len(gpus)} "
                         f"accelerators ({', '.join(d.name for d in gpus)}).")
    shares += [0.0] * (len(gpus) - len(shares))
    if options.num_gpu > 0:
        return split_layers(layers, options.num_gpu, shares, main)
    if need is None:
        raise ValueError("num_gpu=-1 needs a memory measure to know how many layers fit.")

    def fits(count: int) -> bool:
        plan = split_layers(layers, count, shares, main)
        return all(size + HEADROOM <= gpus[index].memory_free
                   for index, size in need(plan).items())

    low, high = 0, layers                      # the largest count that fits, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return split_layers(layers, low, shares, main)


def listed_layers(gpu_layers: dict, layers: int,
                  found: list[pyggml.Device]) -> list[pyggml.Device]:
    """Devices per block, then the output layer's, from {device id or name: layer indices};
    ids are the indices /info reports. Unlisted layers stay on the CPU."""
    cpu = pyggml.cpu_device()
    plan: list[pyggml.Device | None] = [None] * (layers + 1)
    for key, indices in gpu_layers.items():
        device = next((d for d in found if str(key) in (str(d.index), d.name)), None)
        if device is None:
            raise ValueError(f"GPULayers names the device {key!r}, which is not here; the "
                             f"devices are {', '.join(f'{d.index} ({d.name})' for d in found)}.")
        for layer in indices:
            if not 0 <= layer <= layers:
                raise ValueError(f"GPULayers gives layer {layer} to {device.name}, but the model "
                                 f"has layers 0 to {layers} ({layers} is the output layer).")
            if plan[layer] is not None:
                raise ValueError(f"GPULayers gives layer {layer} to both {plan[layer].name} and "
                                 f"{device.name}.")
            plan[layer] = device
    return [device or cpu for device in plan]


class Backends:
    """One open backend per device, made on first use (the CPU's with its thread count)."""

    def __init__(self, threads: int | None = None):
        self.threads = threads
        self._open: dict[str, pyggml.Backend] = {}

    def __getitem__(self, device: pyggml.Device) -> pyggml.Backend:
        if device.name not in self._open:
            self._open[device.name] = device.open(self.threads if device.is_cpu else None)
        return self._open[device.name]

    def ordered(self, devices: list[pyggml.Device]) -> list[pyggml.Backend]:
        return [self[d] for d in devices]

    def close(self) -> None:
        for backend in self._open.values():
            backend.close()
        self._open.clear()
