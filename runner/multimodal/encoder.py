"""Run a projector: pixels (or mel frames) in, embedding rows out, each image or clip
encoded once.

The encoder has its own scheduler over the model's backends (its graphs are unlike the text
model's, and a scheduler keeps the compute memory of the last graph it ran). The last graph
is kept and run again for an image of the same shape. Outputs stay on the host, in a cache
keyed by a hash of the image's bytes that forgets the least recently used beyond its byte
budget, so a later turn about the same image does not encode it again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

import pyggml

from ..models.vision import Pixels

GRAPH_NODES = 8192
CACHE_BYTES = 256 << 20
INPUT_TYPES = {"i": "I32", "f": "F32"}          # numpy dtype kind -> the graph input's type


@dataclass
class _Graph:
    key: tuple
    ctx: pyggml.Context
    graph: pyggml.Graph
    patches: pyggml.Tensor
    inputs: dict[str, pyggml.Tensor]
    output: pyggml.Tensor


class Encoder:
    def __init__(self, projector, scheduler: pyggml.Scheduler, cache_bytes: int = CACHE_BYTES,
                 flash: bool = False):
        self.projector, self.scheduler, self.flash = projector, scheduler, flash
        self.cache_bytes = cache_bytes
        self._outputs: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._kept: _Graph | None = None
        self.encoded = 0                       # images run through the graph (not the cache)

    def cached(self, digest: bytes) -> np.ndarray | None:
        rows = self._outputs.get(digest)
        if rows is not None:
            self._outputs.move_to_end(digest)
        return rows

    def encode(self, digest: bytes, pixels: Pixels) -> np.ndarray:
        """float32 (rows, text embd) for the image whose bytes hash to digest."""
        rows = self.cached(digest)
        if rows is None:
            rows = self._compute(pixels)
            if rows.shape[0] != pixels.rows:
                raise RuntimeError(f"The encoder made {rows.shape[0]} rows of an image that "
                                   f"should make {pixels.rows}.")
            self._outputs[digest] = rows
            self._forget_beyond_budget()
        return rows

    def _forget_beyond_budget(self) -> None:
        total = sum(rows.nbytes for rows in self._outputs.values())
        while total > self.cache_bytes and len(self._outputs) > 1:
            _, rows = self._outputs.popitem(last=False)
            total -= rows.nbytes

    def _compute(self, pixels: Pixels) -> np.ndarray:
        graph = self._graph(pixels)
        self.scheduler.alloc(graph.graph)
        graph.patches.set(pixels.patches)
        for name, tensor in graph.inputs.items():
            tensor.set(pixels.inputs[name])
        self.scheduler.compute_async(graph.graph).wait()
        self.encoded += 1
        rows = graph.output.numpy(copy=True)
        self.scheduler.check()
        return rows

    def _graph(self, pixels: Pixels) -> _Graph:
        if self._kept is not None and self._kept.key == pixels.key:
            return self._kept
        self.forget()
        ctx = pyggml.Context(max_tensors=GRAPH_NODES, graph_size=GRAPH_NODES)
        patches = ctx.new_tensor("F32", pixels.patches.shape, name="patches").set_input()
        inputs = {name: ctx.new_tensor(INPUT_TYPES[array.dtype.kind], array.shape,
                                       name=name).set_input()
                  for name, array in pixels.inputs.items()}
        output = self.projector.forward(patches, pixels.grid, flash=self.flash,
                                        **inputs).set_output()
        self._kept = _Graph(pixels.key, ctx, ctx.graph(output), patches, inputs, output)
        return self._kept

    def worst_case(self) -> pyggml.Graph:
        """The graph of the largest image, to reserve or measure compute memory with (it is
        kept as the last graph)."""
        return self._graph(self.projector.largest()).graph

    def forget(self) -> None:
        if self._kept is not None:
            self._kept.ctx.close()
            self._kept = None

    def close(self) -> None:
        self.forget()
        self._outputs.clear()
