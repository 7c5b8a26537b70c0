"""Run one batch through a model: build its graph, compute, return the logits."""

from __future__ import annotations

import numpy as np

import pyggml

from .batch import Batch
from .kvcache import CausalCache
from .models.base import Inputs

GRAPH_NODES = 16384


class Executor:
    def __init__(self, model, kv: CausalCache, scheduler: pyggml.Scheduler):
        self.model, self.kv, self.scheduler = model, kv, scheduler

    def logits(self, batch: Batch) -> np.ndarray:
        """float32 (len(batch.outputs), vocab): the logits of the batch's output rows."""
        self.kv.start(batch)
        with pyggml.Context(max_tensors=GRAPH_NODES, graph_size=GRAPH_NODES) as ctx:
            n = len(batch)
            inputs = Inputs(
                tokens=ctx.new_tensor("I32", (n,), name="tokens").set_input(),
                positions=ctx.new_tensor("I32", (n,), name="positions").set_input(),
                outputs=ctx.new_tensor("I32", (len(batch.outputs),), name="outputs").set_input(),
                n_tokens=n)
            kv_inputs = self.kv.inputs(ctx, self.model.windows())
            logits = self.model.forward(inputs, kv_inputs).set_output()
            graph = ctx.graph(logits)
            self.scheduler.alloc(graph)
            inputs.tokens.set(batch.tokens)
            inputs.positions.set(batch.positions)
            inputs.outputs.set(batch.outputs)
            kv_inputs.feed()
            self.scheduler.compute_async(graph).wait()
            return logits.numpy(copy=True)

    def shift(self, seq: int, p0: int, p1: int, delta: int) -> None:
        """Move positions [p0, p1) of seq by delta, re-rotating their cached keys."""
        kv = self.kv
        hit = ((kv.seq >> seq) & 1).astype(bool) & (kv.pos >= p0) & (kv.pos < p1)
        if not hit.any():
            return
        deltas = np.where(hit, delta, 0).astype(np.int32)
        with pyggml.Context(max_tensors=8 * len(kv.layers) + 8,
                            graph_size=8 * len(kv.layers) + 8) as ctx:
            shifts = ctx.new_tensor("I32", (kv.size,), name="k_shift").set_input()
            nodes = []
            for layer, shape in enumerate(kv.layers):
                cache = ctx.bind(kv.k[layer])
                keys = cache.reshape(kv.size, shape.kv_heads, shape.head_dim)   # (cells, KVH, D)
                source = keys if cache.dtype == pyggml.F16 else keys.cast("F32")
                rotated = self.model.shift(source, shifts, layer)
                nodes.append(rotated.cpy(keys))
            graph = ctx.graph(*nodes)
            self.scheduler.alloc(graph)
            shifts.set(deltas)
            self.scheduler.compute_async(graph).wait()
        kv.pos[hit] += delta
