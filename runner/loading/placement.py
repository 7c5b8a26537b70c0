"""Where each weight of a model lives, and what a placement costs in memory.

Weights bind to the model before they have memory (GGUFFile.tensors), so where each one goes
is decided from how the model uses it: a probe graph of the model names the operations that
read each weight, as llama.cpp checks each weight's operation against each buffer type.

- A weight of block N goes to layer N's device; a weight outside the blocks that is only read
  by lookups (get_rows: token, position and per-layer embeddings) is an input and stays on the
  CPU; every other weight (output norm and matrix, rope factors) goes with the output layer.
- On its device a weight takes the first memory from which the device computes every
  operation that reads it: the CPU's repacked layouts first (when repacking is on), then the
  device's own memory. When the device computes none of them, the weight falls back to the
  CPU's own memory, as llama.cpp does; a weight the CPU cannot compute either is an error.

measure() sizes a placement without allocating anything: weights and cache from their memory's
allocation sizes, the compute graph of a full batch from ggml's scheduler, through zero-size
buffers that stand in for the real ones.
"""

from __future__ import annotations

import re
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field

import numpy as np

import pyggml

from ..engine.batch import Batch
from ..engine.executor import Executor
from ..kvcache import CausalCache
from ..multimodal.projector_memory import add_measured
from .devices import DeviceOptions, accelerators, listed_layers, offload

BLOCK = re.compile(r"^blk\.(\d+)\.")
VIEW_OPS = {"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"}
INPUT_OPS = {"GET_ROWS"}                 # a weight outside the blocks read only so: an input
PROBE_TOKENS = 8


class PlacementError(ValueError):
    """No device can compute with a weight as the model uses it."""


@dataclass
class Placement:
    layers: list[pyggml.Device]                  # the device of each block, then the output's
    memory: dict[str, pyggml.BufferType]         # every weight's memory
    kind: dict[str, str] = field(default_factory=dict)   # "input" | "output" | "block"

    @property
    def devices(self) -> list[pyggml.Device]:
        """The devices that compute: accelerators in the order ggml lists them, the CPU last."""
        cpu = pyggml.cpu_device()
        used = {d.name for d in self.layers} | {m.device_name for m in self.memory.values()}
        return [d for d in pyggml.devices() if d.name in used and not d.is_cpu] + [cpu]

    def layer_of(self, name: str) -> int | None:
        """A weight's layer: its block, len(blocks) for the output layer, None for inputs."""
        found = BLOCK.match(name)
        if found:
            return int(found.group(1))
        return None if self.kind.get(name) == "input" else len(self.layers) - 1


class Placer:
    """Places one model's weights; its probe of how the model uses them is made once."""

    def __init__(self, model, tensors: dict[str, pyggml.Tensor], embeddings: bool):
        self.tensors = tensors
        self.cpu = pyggml.cpu_device()
        self._stack = ExitStack()
        self.uses = self._probe(model, embeddings)

    def _probe(self, model, embeddings: bool) -> dict[str, list[pyggml.Tensor]]:
        """The nodes of a small graph of the model that compute with each weight (a view of
        a weight is not a use: the nodes that read the view are)."""
        kv = CausalCache(model.cache_layers(), PROBE_TOKENS, None, allocate=False)
        step = Executor(model, kv, None).build(Batch(np.zeros(PROBE_TOKENS),
                                                     np.arange(PROBE_TOKENS),
                                                     np.zeros(PROBE_TOKENS)), embeddings)
        self._stack.callback(step.ctx.close)
        readers = defaultdict(list)              # tensor address -> nodes that read it
        for node in step.graph.nodes():
            for source in node.sources():
                readers[_address(source)].append(node)

        def uses_of(address: int) -> list[pyggml.Tensor]:
            found = []
            for node in readers.get(address, ()):
                found += uses_of(_address(node)) if node.op in VIEW_OPS else [node]
            return found

        # a view addresses a weight's bytes as laid out in plain memory
        self.viewed = {name for name, t in self.tensors.items()
                       if any(node.op in VIEW_OPS for node in readers.get(_address(t), ()))}
        return {name: uses_of(_address(t)) for name, t in self.tensors.items()}

    def place(self, layers: list[pyggml.Device], repack: bool = True) -> Placement:
        """layers: the device of each block, then the output layer's."""
        placement = Placement(list(layers), {})
        for name, tensor in self.tensors.items():
            device, placement.kind[name] = self._home(name, layers)
            placement.memory[name] = self._memory(device, name, tensor, repack)
        return placement

    def _home(self, name: str, layers) -> tuple[pyggml.Device, str]:
        found = BLOCK.match(name)
        if found and int(found.group(1)) < len(layers) - 1:
            return layers[int(found.group(1))], "block"
        uses = self.uses[name]
        if not found and all(use.op in INPUT_OPS for use in uses):
            return self.cpu, "input"
        return layers[-1], "output"

    def _memory(self, device, name: str, tensor, repack: bool) -> pyggml.BufferType:
        uses = self.uses[name]
        repackable = repack and uses and device.is_cpu and name not in self.viewed
        extras = device.extra_buffer_types() if repackable else []
        for memory in extras + [device.buffer_type()]:
            if all(device.supports_with(use, tensor, memory) for use in uses):
                return memory
        if not device.is_cpu:
            return self._memory(self.cpu, name, tensor, repack)
        ops = ", ".join(sorted({use.op for use in uses}))
        raise PlacementError(f"The weight {name} ({tensor.dtype.name}, shape {tensor.shape}) "
                             f"is read by {ops}, which no device here computes with it.")

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> "Placer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class Workload:
    """What a loaded model must hold and compute: the KV cache and the largest batch."""
    context: int                # tokens one sequence holds
    parallel: int = 1
    cache_type: str = "f16"
    flash: bool = False
    batch: int = 512
    embeddings: bool = False

    @property
    def cells(self) -> int:
        return self.context * self.parallel


@dataclass
class Footprint:
    """Bytes per device name: weights and cache per layer (blocks, then the output layer),
    the compute graph; and the CPU's input weights (embeddings), which are in no layer."""
    layers: int
    inputs: int = 0
    mapped: int = 0             # of the weights: those in the CPU's own memory (they map the file)
    weights: dict[str, list[int]] = field(default_factory=dict)
    cache: dict[str, list[int]] = field(default_factory=dict)
    graph: dict[str, int] = field(default_factory=dict)

    def add(self, table: dict, device: str, layer: int, size: int) -> None:
        table.setdefault(device, [0] * (self.layers + 1))[layer] += size

    def total(self, device: str) -> int:
        return (sum(self.weights.get(device, ())) + sum(self.cache.get(device, ())) +
                self.graph.get(device, 0))

    @classmethod
    def of(cls, tensors: dict, placement: Placement, kv: CausalCache,
           graph: dict[str, int]) -> "Footprint":
        """The memory of weights and cache as placement puts them (allocated or not), and
        graph's compute memory per device name."""
        footprint = cls(layers=len(placement.layers) - 1, graph=dict(graph))
        cpu_memory = pyggml.cpu_device().buffer_type()
        for name, tensor in tensors.items():
            memory = placement.memory[name]
            if memory == cpu_memory:
                footprint.mapped += memory.alloc_size(tensor)
            layer = placement.layer_of(name)
            if layer is None:
                footprint.inputs += memory.alloc_size(tensor)
            else:
                footprint.add(footprint.weights, memory.device_name, layer,
                              memory.alloc_size(tensor))
        for layer, (k, v) in enumerate(zip(kv.k, kv.v)):
            memory = placement.layers[layer].buffer_type()
            footprint.add(footprint.cache, memory.device_name, layer,
                          memory.alloc_size(k) + memory.alloc_size(v))
        return footprint


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


def measure(model, tensors: dict, placement: Placement, workload: Workload,
            backends: Backends, projectors=None) -> Footprint:
    """The memory placement takes, per device and layer, measured by ggml without
    allocating (zero-size buffers stand in for weights and cache); with projectors (a
    Loaded with projectors), theirs too."""
    shapes = model.cache_layers()
    kv = CausalCache(shapes, workload.cells, None, workload.cache_type, workload.flash,
                     allocate=False)
    with ExitStack() as stack:
        weights, cache = defaultdict(list), defaultdict(list)
        for name, tensor in tensors.items():
            weights[placement.memory[name]].append(tensor)
        for layer, device in enumerate(placement.layers[:len(shapes)]):
            cache[device.buffer_type()] += [kv.k[layer], kv.v[layer]]
        for memory, group in weights.items():       # the scheduler runs ops where weights are
            stack.enter_context(pyggml.Buffer.dummy(memory, group)).mark_weights()
        for memory, group in cache.items():
            stack.enter_context(pyggml.Buffer.dummy(memory, group))
        scheduler = stack.enter_context(pyggml.Scheduler(backends.ordered(placement.devices)))
        step = Executor(model, kv, scheduler).worst_case(min(workload.batch, workload.context),
                                                         workload.embeddings)
        stack.callback(step.ctx.close)
        graph = {b.device.name: size for b, size in scheduler.reserve_size(step.graph).items()}
    footprint = Footprint.of(tensors, placement, kv, graph)
    if projectors is not None:
        add_measured(footprint, projectors.projectors, projectors.projector_tensors or {},
                     placement, backends, workload.flash)
    return footprint


def choose_layers(model, placer: Placer, options: DeviceOptions, workload: Workload,
                  backends: Backends, repack: bool = True,
                  projectors=None) -> list[pyggml.Device]:
    """The device of each block, then of the output layer: listed by the options, or
    offloaded as they ask (num_gpu=-1: as many layers as the accelerators hold, measured,
    the projectors included)."""
    layers = model.config.layers
    gpus = accelerators(options)
    if options.gpu_layers is not None:
        return listed_layers(options.gpu_layers, layers, pyggml.devices())

    def need(plan: list[int | None]) -> dict[int, int]:
        footprint = measure(model, placer.tensors, placer.place(layer_devices(plan, gpus), repack),
                            workload, backends, projectors)
        return {index: footprint.total(gpu.name) for index, gpu in enumerate(gpus)}

    return layer_devices(offload(layers, gpus, options, need), gpus)


def layer_devices(plan: list[int | None], gpus: list[pyggml.Device]) -> list[pyggml.Device]:
    """Devices per block from accelerator indices (None: the CPU), then the output layer's:
    the last block's."""
    cpu = pyggml.cpu_device()
    devices = [cpu if index is None else gpus[index] for index in plan]
    return devices + [devices[-1] if devices else cpu]


def _address(tensor) -> int:
    return int(pyggml._ggml.ffi.cast("uintptr_t", tensor.ptr))
