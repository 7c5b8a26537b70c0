"""Run batches through a model: build a graph, compute it, return the logits.

A step is built (graph and cache cells, no token values yet), launched (allocated, inputs
filled, computing on the scheduler's compute thread) and finished (waited for, logits read).
Building the next step while the current one computes hides the Python graph-building time
behind the compute; the token values arrive at launch.

A graph's structure depends only on the batch's size, its number of outputs, the cache
cells it sees (n_kv) and how many sequences it holds; positions, tokens, slots and what the
masks are computed from are inputs. So graphs are kept and reused while that shape holds,
as llama.cpp reuses its last one: decode steps rebuild once every 256 tokens. The last
KEPT_GRAPHS shapes are kept, not only the last: parallel sequences make batches of a few
sizes in turn, a prompt's chunk interrupts decoding, and a shape met again costs an
allocation (the scheduler splits it anew), not a build.

Chained steps, where every layer sits on GPUs or RPC servers: each graph also writes its
greedy choices into a small tensor on the output device (the chain), and the next graph
may take tokens from there, so that it is launched before the host has read them: the
device goes from one step to the next without waiting for Python, which reads the tokens
back from the next graph's host-side copy once that is queued.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

import pyggml

from ..kvcache import CausalCache
from ..kvcache.cells import Window
from ..kvcache.graph_view import GraphView
from ..kvcache.rotation import Rotations
from ..models.base import Inputs
from .batch import Batch

GRAPH_NODES = 16384
KEPT_GRAPHS = 4       # graphs kept for reuse, the least recently used given up first
CANDIDATES = 64       # the most logits a sampled step reads from a device (Ollama's top_k: 40)


class Shape(NamedTuple):
    """What a graph's structure depends on: a graph is reused while its shape holds."""
    tokens: int
    outputs: int
    cache: tuple              # cache cells it sees per pool, sequences its masks tell apart
    embeddings: bool          # final hidden states instead of logits
    media: int                # image rows
    candidates: bool          # also picks each row's largest logits on the device
    chained: bool             # takes some tokens from the last step's choices


@dataclass
class Step:
    batch: Batch
    ctx: pyggml.Context
    graph: pyggml.Graph
    inputs: Inputs
    kv_inputs: GraphView
    logits: pyggml.Tensor
    choices: pyggml.Tensor | None = None   # int32 (outputs,): each row's largest logit
    candidates: tuple | None = None    # int32 (outputs, k) ids and their logits (outputs, k, 1)
    token_input: pyggml.Tensor | None = None   # int32 (T,): the tokens given (inputs.tokens
                                               # reads them through the chain, if chained)
    writes_chain: bool = False    # its choices go to the chain (the next step may take them)
    chain_rows: pyggml.Tensor | None = None    # int32 (T,): each token's row of tokens + chain
    chained: pyggml.Tensor | None = None       # int32 (T, 1): the tokens it computed, on the CPU
    sources: np.ndarray | None = None  # launched chained: each token's row of the last choices
    computation: pyggml.Computation | None = None
    queued_behind: pyggml.Computation | None = None   # the compute of this graph it followed
    retired: bool = False         # no longer kept: close once finished


class Executor:
    """choose_on_device: each graph also picks every row's largest logit, so that a greedy
    step reads back one int32 per sequence instead of the vocabulary (196 KB for SmolLM2,
    1 MB for Gemma 3) where the logits live on a GPU or another machine, and can hand it to
    the next step without the host (chain_on); with candidates_on_device, a graph built with
    candidates also picks the CANDIDATES largest, which a top-k sampler draws from."""

    def __init__(self, model, kv: CausalCache, scheduler: pyggml.Scheduler,
                 choose_on_device: bool = False, chain_on: pyggml.Backend | None = None,
                 chain_rows: int = 1, candidates_on_device: bool = True):
        """chain_on: the output layer's backend, to chain steps on: a step is then queued
        behind the last (inline on a device, or on the CPU's compute thread); chain_rows:
        the most outputs a chained step has (one a sequence)."""
        self.model, self.kv, self.scheduler = model, kv, scheduler
        self.choose_on_device = choose_on_device
        self.candidates_on_device = candidates_on_device
        self._kept: OrderedDict[Shape, Step] = OrderedDict()   # graphs by shape, oldest first
        self._read: dict[str, np.ndarray] = {}      # what finish(reuse=True) reads into
        self._chain = _chain(chain_on, chain_rows) if choose_on_device and chain_on else None

    @property
    def chains(self) -> bool:
        """Whether steps may take tokens from the last step's choices on the device."""
        return self._chain is not None

    def build(self, batch: Batch, embeddings: bool = False, candidates: bool = False,
              chained: bool = False) -> Step:
        """Take cache cells for the batch and build its graph, or reuse a kept one of the
        same shape (batch.tokens may be placeholders until launch). embeddings: the graph
        returns final hidden states instead of logits. candidates: it also picks each row's
        largest logits on the device (where it chooses there). chained: some tokens will
        be the last step's choices (launch's sources; needs self.chains)."""
        self.kv.start(batch, streams=self.model.attends_in_streams)
        candidates = candidates and self.choose_on_device and self.candidates_on_device and \
            not embeddings
        if chained and self._chain is None:
            raise ValueError("This executor does not chain steps: its output layer is not on "
                             "a device that queues graphs.")
        key = Shape(len(batch), len(batch.outputs), self.kv.current.shape, embeddings,
                    batch.n_media, candidates, chained)
        step = self._kept.get(key)
        if step is not None:
            self._kept.move_to_end(key)
            step.batch = batch
        else:
            step = self._kept[key] = self._build(batch, key)
            for old in self._given_up(key):
                self._retire(self._kept.pop(old))
        step.kv_inputs.prepare(self.kv.current)
        return step

    def _given_up(self, newest: Shape) -> list[Shape]:
        """The kept shapes to let go once newest is built: any of image rows (its shape
        seldom recurs, and its batch holds the rows' embeddings), then the least recently
        used beyond KEPT_GRAPHS."""
        gone = [k for k in self._kept if k != newest and k.media]
        rest = [k for k in self._kept if k not in gone]
        return gone + rest[:max(0, len(rest) - KEPT_GRAPHS)]

    def worst_case(self, n: int, embeddings: bool = False) -> Step:
        """The graph of n tokens that sees every cache cell: no step needs more compute
        memory (reserve or measure with it). It is not kept; close step.ctx, and remove the
        cells it took (sequence 0), when done."""
        batch = Batch(np.zeros(n), np.arange(n), np.zeros(n))
        self.kv.start(batch, all_cells=True)
        return self._build(batch, Shape(n, 1, self.kv.current.shape, embeddings, 0, not embeddings,
                                        self.chains and not embeddings))

    def _retire(self, step: Step) -> None:
        """Close a replaced graph now, or when its compute in flight finishes."""
        if step.computation is None:
            step.ctx.close()
        else:
            step.retired = True

    def _build(self, batch: Batch, key: Shape) -> Step:
        ctx = pyggml.Context(max_tensors=GRAPH_NODES, graph_size=GRAPH_NODES)
        n = len(batch)
        token_input = tokens = ctx.new_tensor("I32", (n,), name="tokens").set_input()
        chain_rows = chained = None
        if key.chained:
            chain_rows = ctx.new_tensor("I32", (n,), name="chain_rows").set_input()
            table = tokens.concat(ctx.bind(self._chain))                  # (T + chain,)
            chained = table.reshape(-1, 1).get_rows(chain_rows).set_output()     # (T, 1)
            for node in (table, chained):                 # read back from host memory
                self.scheduler.place(node, self.scheduler.backends[-1])
            tokens = chained.reshape(n)
        inputs = Inputs(
            tokens=tokens,
            positions=ctx.new_tensor("I32", (n * self.model.position_axes(),),
                                     name="positions").set_input(),
            outputs=ctx.new_tensor("I32", (len(batch.outputs),), name="outputs").set_input(),
            n_tokens=n, embeddings=key.embeddings)
        if batch.n_media:
            assert batch.media is not None                 # the rows' embeddings
            inputs.media = ctx.new_tensor("F32", batch.media.shape, name="media").set_input()
            inputs.media_rows = ctx.new_tensor("I32", (batch.n_media,),
                                               name="media_rows").set_input()
        kv_inputs = self.kv.inputs(ctx, self.model.windows(), self.model.causal,
                                   self.model.media_windows())
        logits = self.model.forward(inputs, kv_inputs).set_output()    # (outputs, vocab)
        outputs, choices, candidates = [logits], None, None
        rows, vocab = logits.shape
        writes_chain = self._chain is not None and not key.embeddings and \
            rows <= self._chain.shape[0]
        if self.choose_on_device and not key.embeddings:
            choices = logits.argmax().set_output()                         # (outputs,)
            outputs.append(choices)
            if writes_chain:
                outputs.append(choices.cpy(ctx.bind(self._chain).view((rows,))))
            if key.candidates and vocab > CANDIDATES:          # a smaller vocabulary is read whole
                ids = logits.top_k(CANDIDATES).set_output()               # (outputs, k)
                values = logits.reshape(rows, vocab, 1).get_rows(ids)     # (outputs, k, 1)
                candidates = ids, values.set_output()
                outputs += candidates
        # Inputs.lookup's first, then the order the outputs reach: the token lookup (on the
        # CPU) before the masks (at the first attention), so the layers' device gets one
        # split. Masks first made two, and an RPC device, which repeats only the last graph
        # it was sent, got both in full every step (0.6-0.7 ms a step on loopback). The
        # cache's writes (recurrent states) before the outputs: each is then computed right
        # after the layer that makes it, its source still in the CPU's cache and on its
        # layer's device, as llama.cpp orders them; last, they read a decode step's 18 MB of
        # states back from memory (4% of a Qwen 3.5 twin's step) and returned to the first
        # devices after the output layer.
        graph = ctx.graph(*inputs.first, *kv_inputs.writes, *outputs)
        return Step(batch, ctx, graph, inputs, kv_inputs, logits, choices,
                    candidates, token_input, writes_chain, chain_rows, chained)

    def launch(self, step: Step, tokens=None, sources=None) -> None:
        """Allocate, fill the inputs (tokens replace the batch's placeholders) and start.
        sources (a chained step): for each token, the row of the last step's choices it
        takes, or -1 (its own). Queued behind a chained step of the same graph, this does
        not wait for it (the device does)."""
        if tokens is not None:
            step.batch.tokens = np.asarray(tokens, dtype=np.int32)
        self.scheduler.alloc(step.graph)
        if step.chain_rows is not None:
            n = len(step.batch)
            rows = np.arange(n, dtype=np.int32)
            if sources is not None:
                sources = np.asarray(sources, dtype=np.int32)
                rows = np.where(sources < 0, rows, n + sources).astype(np.int32)
            step.chain_rows.set(rows)
        assert step.token_input is not None                # _build makes it
        step.token_input.set(step.batch.tokens)
        step.inputs.positions.set(step.batch.rope_positions(self.model.position_axes()))
        step.inputs.outputs.set(step.batch.outputs)
        if step.batch.n_media:                             # built with the image rows' inputs
            assert step.inputs.media is not None and step.inputs.media_rows is not None
            step.inputs.media.set(step.batch.media)
            step.inputs.media_rows.set(step.batch.media_rows)
        step.kv_inputs.feed()
        step.sources = sources
        step.queued_behind = step.computation if sources is not None else None
        # queued behind this step on the compute thread, the next one overwrites its choices
        # before handed_on reads them: the thread copies them out first
        keep = [step.choices] if step.writes_chain and not self.scheduler.inline else ()
        step.computation = self.scheduler.compute_async(step.graph, keep=keep)

    def finish(self, step: Step, reuse: bool = False, read: str = "logits",
               borrow: bool = False):
        """Wait; float32 (len(batch.outputs), vocab), or (..., embd) for embeddings. read
        (what the step has): "choices", only each row's largest logit's index, int32
        (outputs,); "candidates", (ids int32 (outputs, k), their logits float32 (outputs, k)).
        reuse: read into the array the last such call returned (valid until the next one),
        which spares a step a fresh allocation of the whole vocabulary. borrow: logits in
        host memory are not copied at all (valid until the next launch)."""
        try:
            assert step.computation is not None            # launched
            step.computation.wait()
            if read == "logits" and borrow and (logits := step.logits.borrow()) is not None:
                result = logits
            elif read == "choices":
                result = self._read_reused(step.choices, "choices")
            elif read == "candidates":
                assert step.candidates is not None         # built with candidates
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

    def handed_on(self, step: Step, last: Step) -> np.ndarray:
        """int32 (T,): the tokens a chained step computes, its placeholders filled with the
        choices of last, the step before it; read from host memory once step is launched
        (by then the device finished last: it is done with, unread)."""
        try:
            if not self.scheduler.inline:           # the CPU's compute thread: from last's
                done = step.queued_behind if last is step else last.computation   # choices
                assert done is not None and step.sources is not None   # launched chained
                done.wait()
                step.queued_behind = None
                choices = done.kept(last.choices)
                rows = np.maximum(step.sources, 0)
                return np.where(step.sources < 0, step.batch.tokens, choices[rows])
            tokens = self._read_reused(step.chained, "chained")[:, 0]
            self.scheduler.check()        # a device on another machine may be gone: not data
            return tokens
        finally:
            if last is not step:          # another graph: allocating it waited for last's
                last.computation = None
                if last.retired:
                    last.ctx.close()

    def cancel(self, step: Step) -> None:
        """Give back the cells of a step that will not run."""
        batch = step.batch
        for seq in np.unique(batch.seqs):
            self.kv.remove(int(seq), int(batch.positions.min()))

    def forget(self) -> None:
        """Drop the kept graphs (after a failed compute, whose graph may not be reused)."""
        while self._kept:
            self._retire(self._kept.popitem()[1])

    def abandon(self, step: Step) -> None:
        """After a failure: step, launched or not, will not be finished (nor its graph
        reused)."""
        self.forget()
        step.computation = None
        if step.retired:
            step.ctx.close()

    def close(self) -> None:
        """Free the chain (after the scheduler: no compute may be in flight)."""
        if self._chain is not None:
            for buffer in self._chain.context.keepalive:
                buffer.close()
            self._chain.context.close()
            self._chain = None

    def logits(self, batch: Batch, reuse: bool = False) -> np.ndarray:
        """Compute the batch now; reuse as finish() takes it."""
        step = self.build(batch)
        self.launch(step)
        return self.finish(step, reuse)

    def shift(self, seq: int, p0: int, p1: int, delta: int, rope_delta: int | None = None) -> None:
        """Move positions [p0, p1) of seq by delta, re-rotating their cached keys by
        rope_delta (by delta where None; they differ where images made a sequence's rope
        positions fall behind its cells, multimodal/axes.py)."""
        rope_delta = delta if rope_delta is None else rope_delta
        kv = self.kv
        hits = kv.shift_cells(seq, p0, p1)
        if not any(hit.any() for hit in hits.values()):
            return
        with pyggml.Context(max_tensors=16 * len(kv.layers) + 8,
                            graph_size=16 * len(kv.layers) + 8) as ctx:
            shifts = {w: ctx.new_tensor("I32", (len(hit),), name=f"k_shift_{w}").set_input()
                      for w, hit in hits.items() if w in kv.pool_of}
            hadamard = Rotations(ctx, kv.key_rotation)    # quantized keys were rotated
            nodes: list[pyggml.Tensor] = []
            rotating: set[Window] = set()         # the pools whose keys rotate
            for layer, shape in enumerate(kv.layers):
                if kv.k[layer] is None:               # a recurrent layer's: no keys
                    continue
                cache, window = ctx.bind(kv.k[layer]), kv.pool_of[layer]
                keys = cache.reshape(len(hits[window]), shape.kv_heads, shape.head_dim)
                source = keys if cache.dtype == pyggml.F16 else keys.cast("F32")  # (cells, KVH, D)
                side = kv.key_rotation[layer]
                rotated = self.model.shift(hadamard.rotate(source, side), shifts[window], layer)
                if rotated is not None:                   # None: this layer has no rope
                    nodes.append(hadamard.rotate(rotated, side).cpy(keys))
                    rotating.add(window)
            if nodes:
                graph = ctx.graph(*nodes)
                self.scheduler.alloc(graph)
                for window in rotating:
                    shifts[window].set(np.where(hits[window], rope_delta, 0).astype(np.int32))
                for tensor, matrix in hadamard.inputs():
                    tensor.set(matrix)
                self.scheduler.compute_async(graph).wait()
        kv.move(seq, p0, p1, delta)


def _chain(backend: pyggml.Backend, rows: int) -> pyggml.Tensor | None:
    """The chain: int32 (rows,) in backend's memory, zeroed; None where that device cannot
    copy int32 into it (then steps are not chained)."""
    with pyggml.Context(max_tensors=4) as probe:
        target = probe.new_tensor("I32", (rows,))
        if not backend.supports(probe.new_tensor("I32", (rows,)).cpy(target)):
            return None
    storage = pyggml.Context(max_tensors=1, graphs=0)
    chain = storage.new_tensor("I32", (rows,), name="chain")
    storage.allocate(backend).clear(0)
    return chain
