"""What a placement costs in memory, and how many layers fit on the accelerators.

measure() sizes a placement without allocating anything: weights and cache from their memory's
allocation sizes, the compute graph of a full batch from ggml's scheduler (the executor's
worst-case graph), through zero-size buffers that stand in for the real ones; the projectors'
encoders too. choose_layers() offloads as many layers as the accelerators hold, measured.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field

import pyggml

from ..engine.executor import Executor
from ..kvcache import CausalCache, new_cache
from ..multimodal.projector_memory import add_measured
from .devices import Backends, DeviceOptions, accelerators, listed_layers, offload
from .placement import Placement, Placer


@dataclass
class Workload:
    """What a loaded model must hold and compute: the KV cache and the largest batch."""
    context: int                # tokens one sequence holds
    parallel: int = 1
    cache_type: str = "f16"
    flash: bool = False
    batch: int = 512
    embeddings: bool = False
    swa_full: bool = False      # sliding layers keep the whole context (llama.cpp's --swa-full)
    checkpoints: int | None = None   # recurrent states kept per sequence (None: by size)

    @property
    def cells(self) -> int:
        return self.context * self.parallel

    def cache(self, shapes, backends, allocate: bool = True) -> CausalCache:
        """The KV cache of layers of shapes: a sliding layer's holds its window for every
        sequence and a batch (an encoder's batch is its whole input: no window pools); a
        recurrent layer's, its states and checkpoints for every sequence."""
        windowed = not (self.swa_full or self.embeddings)
        return new_cache(shapes, self.cells, backends, self.cache_type, self.flash,
                         allocate, window_cells=(self.parallel, self.batch) if windowed
                         else None, sequences=self.parallel, checkpoints=self.checkpoints)


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
        for layer in range(len(kv.k)):
            memory = placement.layers[layer].buffer_type()
            footprint.add(footprint.cache, memory.device_name, layer,
                          sum(memory.alloc_size(t) for t in kv.tensors(layer)))
        return footprint


def measure(model, tensors: dict, placement: Placement, workload: Workload,
            backends: Backends, projectors=None) -> Footprint:
    """The memory placement takes, per device and layer, measured by ggml without
    allocating (zero-size buffers stand in for weights and cache); with projectors (a
    Loaded with projectors), theirs too."""
    shapes = model.cache_layers()
    kv = workload.cache(shapes, [backends[d] for d in placement.layers[:len(shapes)]],
                        allocate=False)
    with ExitStack() as stack:
        weights: defaultdict[pyggml.BufferType, list[pyggml.Tensor]] = defaultdict(list)
        cache: defaultdict[pyggml.BufferType, list[pyggml.Tensor]] = defaultdict(list)
        for name, tensor in tensors.items():
            weights[placement.memory[name]].append(tensor)
        for layer, device in enumerate(placement.layers[:len(shapes)]):
            cache[device.buffer_type()] += kv.tensors(layer)
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
