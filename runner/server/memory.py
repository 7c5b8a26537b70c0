"""The memory a layout needs, per layer and per device: weights, KV cache, compute graph.

Before loading (fit, alloc) the figures come from the GGUF header and the metadata: weights
exactly, the KV cache exactly, the compute graph as an upper estimate. Once loaded (commit)
they are read off the allocated buffers, the graph's from the scheduler.
Every layer is on the CPU: this runner does not split layers across devices yet.
"""

from __future__ import annotations

import math
import re

import pyggml

from ..kvcache.causal import CACHE_TYPES

BLOCK = re.compile(r"^blk\.(\d+)\.")
OUTPUT_TENSORS = ("output.weight", "output_norm.weight")


def _nbytes(info) -> int:
    return pyggml.GGMLType(info.type).row_size(info.ne[0]) * math.prod(info.ne[1:])


def weights_by_layer(gguf_file: pyggml.GGUFFile, layers: int) -> tuple[int, list[int]]:
    """(input weights, [bytes of each layer] + [output layer])."""
    per_layer, inputs = [0] * (layers + 1), 0
    for info in gguf_file.header.tensors:
        found = BLOCK.match(info.name)
        if found:
            per_layer[int(found.group(1))] += _nbytes(info)
        elif info.name in OUTPUT_TENSORS:
            per_layer[layers] += _nbytes(info)
        else:
            inputs += _nbytes(info)
    return inputs, per_layer


def _hyper(meta: dict) -> dict:
    arch = meta["general.architecture"]
    get = lambda key, default=None: meta.get(f"{arch}.{key}", default)  # noqa: E731
    heads = get("attention.head_count")
    embd = get("embedding_length")
    head_dim = get("attention.key_length", embd // heads)
    tokens = meta.get("tokenizer.ggml.tokens")
    return dict(layers=get("block_count"), embd=embd, heads=heads,
                kv_heads=get("attention.head_count_kv", heads), head_dim=head_dim,
                v_dim=get("attention.value_length", head_dim),
                ffn=get("feed_forward_length"), vocab=len(tokens) if tokens else 0,
                context=get("context_length", 2048))


def cache_by_layer(h: dict, cells: int, cache_type: str) -> list[int]:
    ggml_type = pyggml.GGMLType[CACHE_TYPES[cache_type]]
    row = ggml_type.row_size(h["kv_heads"] * h["head_dim"]) + \
        ggml_type.row_size(h["kv_heads"] * h["v_dim"])
    return [cells * row] * h["layers"]


def graph_estimate(h: dict, batch: int, cells: int, flash: bool) -> int:
    """An upper estimate of the compute buffer: a full batch's activations and logits, and
    without flash attention its attention scores over every cell (twice: before and after
    the softmax)."""
    activations = 4 * batch * (h["vocab"] + 8 * h["embd"] + 3 * h["ffn"])
    scores = 0 if flash else 2 * 4 * h["heads"] * batch * cells
    return activations + scores


def memory_report(gguf_file: pyggml.GGUFFile, layout, model=None) -> dict:
    h = _hyper(gguf_file.metadata)
    inputs, weights = weights_by_layer(gguf_file, h["layers"])
    per_seq = min(layout.ctx_size // layout.parallel, h["context"])
    cells = per_seq * layout.parallel
    if model is None:
        cache = cache_by_layer(h, cells, layout.kv_cache_type)
        graph = graph_estimate(h, min(layout.batch_size, cells), cells, layout.flash)
    else:
        cache = [t.nbytes + v.nbytes for t, v in zip(model.kv.k, model.kv.v)]
        graph = model.scheduler.buffer_size(model.backend)
    return {"InputWeights": inputs,
            "CPU": {"Name": "CPU", "ID": "0", "Weights": weights, "Cache": cache + [0],
                    "Graph": graph},
            "GPUs": [],
            "Total": inputs + sum(weights) + sum(cache) + graph}
