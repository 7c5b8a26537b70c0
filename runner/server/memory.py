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

from ..kvcache import LayerShape
from ..kvcache.causal import CACHE_TYPES
from ..models import model_class

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


def cache_by_layer(shapes: list[LayerShape], cells: int, cache_type: str) -> list[int]:
    """Bytes of K and V per layer, as CausalCache allocates them."""
    ggml_type = pyggml.GGMLType[CACHE_TYPES[cache_type]]
    return [cells * (ggml_type.row_size(s.kv_heads * s.head_dim) +
                     ggml_type.row_size(s.kv_heads * s.v_dim)) for s in shapes]


def graph_estimate(c, batch: int, cells: int, flash: bool) -> int:
    """An upper estimate of the compute buffer: a full batch's activations and logits, and
    without flash attention its attention scores over every cell (twice: before and after
    the softmax)."""
    activations = 4 * batch * (c.vocab + 8 * c.embd + 3 * c.ffn)
    scores = 0 if flash else 2 * 4 * c.heads * batch * cells
    return activations + scores


def memory_report(gguf_file: pyggml.GGUFFile, layout, model=None) -> dict:
    meta = gguf_file.metadata
    architecture = model_class(meta.get("general.architecture"))
    c = architecture.config_of(meta)                     # as the model reads it
    inputs, weights = weights_by_layer(gguf_file, c.layers)
    per_seq = min(layout.ctx_size // layout.parallel, c.context)
    cells = per_seq * layout.parallel
    if model is None:
        cache = cache_by_layer(architecture.layer_shapes(c), cells, layout.kv_cache_type)
        graph = graph_estimate(c, min(layout.batch_size, cells), cells, layout.flash)
    else:
        cache = [t.nbytes + v.nbytes for t, v in zip(model.kv.k, model.kv.v)]
        graph = model.scheduler.buffer_size(model.backend)
    return {"InputWeights": inputs,
            "CPU": {"Name": "CPU", "ID": "0", "Weights": weights,
                    # layers that read another layer's cache (Gemma 4's) and the output hold none
                    "Cache": cache + [0] * (c.layers + 1 - len(cache)),
                    "Graph": graph},
            "GPUs": [],
            "Total": inputs + sum(weights) + sum(cache) + graph}
