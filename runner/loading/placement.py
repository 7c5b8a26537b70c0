"""Where each weight of a model lives (fit.py: what a placement costs in memory).

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
from ..kvcache import new_cache

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
        kv = new_cache(model.cache_layers(), PROBE_TOKENS, None, allocate=False)
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


def _address(tensor) -> int:
    return int(pyggml._ggml.ffi.cast("uintptr_t", tensor.ptr))
