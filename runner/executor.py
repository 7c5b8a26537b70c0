"""Run batches through a model: build a graph, compute it, return the logits.

A step is built (graph and cache cells, no token values yet), launched (allocated, inputs
filled, computing on the scheduler's worker thread) and finished (waited for, logits read).
Building the next step while the current one computes hides the Python graph-building time
behind the compute; the token values arrive at launch.

A graph's structure depends only on the batch's size, its number of outputs and the cache
cells it sees (n_kv); positions, tokens, slots and masks are inputs. So the last graph is
kept and reused while that shape holds, as llama.cpp does: decode steps rebuild once every
256 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import pyggml

from .batch import Batch
from .kvcache import CausalCache
from .kvcache.causal import GraphView
from .kvcache.rotation import Rotations
from .models.base import Inputs

GRAPH_NODES = 16384
CANDIDATES = 64       # the most logits a sampled step reads from a device (Ollama's top_k: 40)


@dataclass
class Step:
    batch: Batch
    ctx: pyggml.Context
    graph: pyggml.Graph
    inputs: Inputs
    kv_inputs: GraphView
    logits: pyggml.Tensor
    key: tuple
    choices: pyggml.Tensor | None = None   # int32 (outputs,): each row's largest logit
    candidates: tuple | None = None    # int32 (outputs, k) ids and their logits (outputs, k, 1)
    computation: pyggml.Computation | None = None
    retired: bool = False         # replaced as the kept graph: close once finished


class Executor:
    """choose_on_device: the logits live on a GPU or another machine; each graph then also
    picks every row's largest logit there, so that a greedy step reads back one int32 per
    sequence instead of the vocabulary (196 KB for SmolLM2, 1 MB for Gemma 3); a graph built
    with candidates also picks the CANDIDATES largest, which a top-k sampler draws from."""

    def __init__(self, model, kv: CausalCache, scheduler: pyggml.Scheduler,
                 choose_on_device: bool = False):
        self.model, self.kv, self.scheduler = model, kv, scheduler
        self.choose_on_device = choose_on_device
        self._kept: Step | None = None      # the last graph, reused while its shape holds
        self._read: dict[str, np.ndarray] = {}      # what finish(reuse=True) reads into

    def build(self, batch: Batch, embeddings: bool = False, candidates: bool = False) -> Step:
        """Take cache cells for the batch and build its graph, or reuse the last one of the
        same shape (batch.tokens may be placeholders until launch). embeddings: the graph
        returns final hidden states instead of logits. candidates: it also picks each row's
        largest logits on the device (where it chooses there)."""
        self.kv.start(batch)
        candidates = candidates and self.choose_on_device and not embeddings
        key = (len(batch), len(batch.outputs), self.kv.n_kv, embeddings, batch.n_media,
               candidates)
        kept = self._kept
        if kept is not None and kept.key == key:
            kept.batch = batch
            kept.kv_inputs.prepare(self.kv.current)
            return kept
        step = self._build(batch, key)
        step.kv_inputs.prepare(self.kv.current)
        if kept is not None:
            self._retire(kept)
        self._kept = step
        return step

    def worst_case(self, n: int, embeddings: bool = False) -> Step:
        """The graph of n tokens that sees every cache cell: no step needs more compute
        memory (reserve or measure with it). It is not kept; close step.ctx, and remove the
        cells it took (sequence 0), when done."""
        batch = Batch(np.zeros(n), np.arange(n), np.zeros(n))
        self.kv.start(batch, all_cells=True)
        return self._build(batch, (n, 1, self.kv.size, embeddings, 0, not embeddings))

    def _retire(self, step: Step) -> None:
        """Close a replaced graph now, or when its compute in flight finishes."""
        if step.computation is None:
            step.ctx.close()
        else:
            step.retired = True

    def _build(self, batch: Batch, key: tuple) -> Step:
        ctx = pyggml.Context(max_tensors=GRAPH_NODES, graph_size=GRAPH_NODES)
        n = len(batch)
        inputs = Inputs(
            tokens=ctx.new_tensor("I32", (n,), name="tokens").set_input(),
            positions=ctx.new_tensor("I32", (n,), name="positions").set_input(),
            outputs=ctx.new_tensor("I32", (len(batch.outputs),), name="outputs").set_input(),
            n_tokens=n, embeddings=key[3])
        if batch.n_media:
            inputs.media = ctx.new_tensor("F32", batch.media.shape, name="media").set_input()
            inputs.media_rows = ctx.new_tensor("I32", (batch.n_media,),
                                               name="media_rows").set_input()
        kv_inputs = self.kv.inputs(ctx, self.model.windows(), getattr(self.model, "causal", True),
                                   self.model.media_windows())
        logits = self.model.forward(inputs, kv_inputs).set_output()    # (outputs, vocab)
        outputs, choices, candidates = [logits], None, None
        if self.choose_on_device and not key[3]:
            choices = logits.argmax().set_output()                         # (outputs,)
            outputs.append(choices)
            rows, vocab = logits.shape
            if key[5] and vocab > CANDIDATES:          # a smaller vocabulary is read whole
                ids = logits.top_k(CANDIDATES).set_output()               # (outputs, k)
                values = logits.reshape(rows, vocab, 1).get_rows(ids)     # (outputs, k, 1)
                candidates = ids, values.set_output()
                outputs += candidates
        return Step(batch, ctx, ctx.graph(*outputs), inputs, kv_inputs, logits, key, choices,
                    candidates)

    def launch(self, step: Step, tokens=None) -> None:
        """Allocate, fill the inputs (tokens replace the batch's placeholders) and start."""
        if tokens is not None:
            step.batch.tokens = np.asarray(tokens, dtype=np.int32)
        self.scheduler.alloc(step.graph)
        step.inputs.tokens.set(step.batch.tokens)
        step.inputs.positions.set(step.batch.positions)
        step.inputs.outputs.set(step.batch.outputs)
        if step.batch.n_media:
            step.inputs.media.set(step.batch.media)
            step.inputs.media_rows.set(step.batch.media_rows)
        step.kv_inputs.feed()
        step.computation = self.scheduler.compute_async(step.graph)

    def finish(self, step: Step, reuse: bool = False, read: str = "logits"):
        """Wait; float32 (len(batch.outputs), vocab), or (..., embd) for embeddings. read
        (what the step has): "choices", only each row's largest logit's index, int32
        (outputs,); "candidates", (ids int32 (outputs, k), their logits float32 (outputs, k)).
        reuse: read into the array the last such call returned (valid until the next one),
        which spares a step a fresh allocation of the whole vocabulary."""
        try:
            step.computation.wait()
            if read == "choices":
                result = self._read_reused(step.choices, "choices")
            elif read == "candidates":
                ids, values = step.candidates
                result = (self._read_reused(ids, "ids"),
                          self._read_reused(values, "values")[..., 0])
            elif reuse:
                result = self._read_reused(step.logits, "logits")
            else:
                result = step.logits.numpy(copy=True)
            self.scheduler.check()        # a device on another machine may be gone: not data
            return result
        except Exception:
            self.forget()
            raise
        finally:
            step.computation = None
            if step.retired:
                step.ctx.close()

    def _read_reused(self, tensor: pyggml.Tensor, what: str) -> np.ndarray:
        """tensor's rows read into the array kept for what: in pinned memory where tensor
        lives on a GPU (a faster copy), with room for a few rows so that their count can vary
        without a new one."""
        rows, *width = tensor.shape
        kept = self._read.get(what)
        if kept is None or kept.shape[0] < rows or list(kept.shape[1:]) != width:
            kept = self._read[what] = tensor.host_array((max(rows, 4), *width))
        return tensor.numpy(out=kept[:rows])

    def cancel(self, step: Step) -> None:
        """Give back the cells of a step that will not run."""
        batch = step.batch
        for seq in np.unique(batch.seqs):
            self.kv.remove(int(seq), int(batch.positions.min()))

    def forget(self) -> None:
        """Drop the kept graph (after a failed compute, whose graph may not be reused)."""
        if self._kept is not None:
            self._retire(self._kept)
            self._kept = None

    def logits(self, batch: Batch, reuse: bool = False) -> np.ndarray:
        """Compute the batch now; reuse as finish() takes it."""
        step = self.build(batch)
        self.launch(step)
        return self.finish(step, reuse)

    def shift(self, seq: int, p0: int, p1: int, delta: int) -> None:
        """Move positions [p0, p1) of seq by delta, re-rotating their cached keys."""
        kv = self.kv
        hit = kv.cells(seq, p0, p1)
        if not hit.any():
            return
        self.forget()           # a graph split over devices is not allocated again after another
        deltas = np.where(hit, delta, 0).astype(np.int32)
        with pyggml.Context(max_tensors=16 * len(kv.layers) + 8,
                            graph_size=16 * len(kv.layers) + 8) as ctx:
            shifts = ctx.new_tensor("I32", (kv.size,), name="k_shift").set_input()
            hadamard = Rotations(ctx, kv.key_rotation)    # quantized keys were rotated
            nodes = []
            for layer, shape in enumerate(kv.layers):
                cache = ctx.bind(kv.k[layer])
                keys = cache.reshape(kv.size, shape.kv_heads, shape.head_dim)   # (cells, KVH, D)
                source = keys if cache.dtype == pyggml.F16 else keys.cast("F32")
                side = kv.key_rotation[layer]
                rotated = self.model.shift(hadamard.rotate(source, side), shifts, layer)
                if rotated is not None:                   # None: this layer has no rope
                    nodes.append(hadamard.rotate(rotated, side).cpy(keys))
            if nodes:
                graph = ctx.graph(*nodes)
                self.scheduler.alloc(graph)
                shifts.set(deltas)
                for tensor, matrix in hadamard.inputs():
                    tensor.set(matrix)
                self.scheduler.compute_async(graph).wait()
        kv.move(hit, delta)
