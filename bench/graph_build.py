"""How long building graphs in Python takes (no compute).

    python bench/graph_build.py [--layers 30] [--repeat 200]

Builds the graph of one decode step of a llama-shaped model (SmolLM2-135M's dimensions by
default: 30 layers, embedding 576, 9 heads, 3 KV heads, head size 64, FFN 1536, vocab 49152)
against a KV cache of 512 cells, with and without flash attention, and times single binding
calls. Weights and cache are metadata only: nothing is allocated or computed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import pyggml
from pyggml._ggml import lib


@dataclass
class Shape:
    layers: int = 30
    embd: int = 576
    heads: int = 9
    kv_heads: int = 3
    head_dim: int = 64
    ffn: int = 1536
    vocab: int = 49152
    kv_cells: int = 512


def make_weights(shape: Shape):
    ctx = pyggml.Context(max_tensors=16 * shape.layers + 8, graphs=0)
    new = ctx.new_tensor
    kv = shape.kv_heads * shape.head_dim
    weights = {"token_embd": new("Q8_0", (shape.vocab, shape.embd)),
               "output_norm": new("F32", (shape.embd,)), "layers": []}
    for _ in range(shape.layers):
        weights["layers"].append({
            "attn_norm": new("F32", (shape.embd,)),
            "attn_q": new("Q4_1", (shape.heads * shape.head_dim, shape.embd)),
            "attn_k": new("Q4_1", (kv, shape.embd)),
            "attn_v": new("Q4_1", (kv, shape.embd)),
            "attn_output": new("Q4_1", (shape.embd, shape.heads * shape.head_dim)),
            "ffn_norm": new("F32", (shape.embd,)),
            "ffn_gate": new("Q4_1", (shape.ffn, shape.embd)),
            "ffn_up": new("Q4_1", (shape.ffn, shape.embd)),
            "ffn_down": new("Q4_1", (shape.embd, shape.ffn)),
            "k_cache": new("F16", (shape.kv_cells, kv)),
            "v_cache": new("F16", (shape.kv_cells, kv)),
        })
    return ctx, weights


def build_decode_graph(shape: Shape, weights, flash: bool, tokens: int = 1):
    ctx = pyggml.Context(max_tensors=40 * shape.layers + 64, graph_size=8192)
    ids = ctx.new_tensor("I32", (tokens,)).set_input()
    pos = ctx.new_tensor("I32", (tokens,)).set_input()
    slots = ctx.new_tensor("I64", (tokens,)).set_input()
    mask = ctx.new_tensor("F16", (tokens, shape.kv_cells)).set_input()
    hd, kvh, n_kv = shape.head_dim, shape.kv_heads, shape.kv_cells
    x = weights["token_embd"].get_rows(ids)                         # (T, E)
    for layer in weights["layers"]:
        h = x.rms_norm(1e-5).mul(layer["attn_norm"])
        q = layer["attn_q"].mul_mat(h).reshape(tokens, shape.heads, hd)     # (T, H, D)
        k = layer["attn_k"].mul_mat(h).reshape(tokens, kvh, hd)
        v = layer["attn_v"].mul_mat(h)                                      # (T, KV*D)
        q = q.rope_ext(pos, hd, "normal", freq_base=100000.0)
        k = k.rope_ext(pos, hd, "normal", freq_base=100000.0)
        k_cache, v_cache = ctx.bind(layer["k_cache"]), ctx.bind(layer["v_cache"])
        k_store = k_cache.set_rows(k.reshape(tokens, kvh * hd), slots)
        v_store = v_cache.set_rows(v, slots)
        keys = k_store.view((n_kv, kvh, hd)).permute(1, 0, 2)              # (KV, n_kv, D)
        values = v_store.view((n_kv, kvh, hd)).permute(1, 0, 2)
        qh = q.permute(1, 0, 2)                                             # (H, T, D)
        if flash:
            attn = qh.flash_attn_ext(keys, values, mask, hd ** -0.5)        # (T, H, D)
        else:
            scores = keys.mul_mat(qh).soft_max(mask, hd ** -0.5)            # (H, T, n_kv)
            attn = values.permute(0, 2, 1).cont().mul_mat(scores).permute(1, 0, 2)
        attn = attn.cont().reshape(tokens, shape.heads * hd)
        x = x.add(layer["attn_output"].mul_mat(attn))
        h = x.rms_norm(1e-5).mul(layer["ffn_norm"])
        gate = layer["ffn_gate"].mul_mat(h).silu()
        x = x.add(layer["ffn_down"].mul_mat(gate.mul(layer["ffn_up"].mul_mat(h))))
    logits = weights["token_embd"].mul_mat(x.rms_norm(1e-5).mul(weights["output_norm"]))
    graph = ctx.graph(logits.set_output())
    return ctx, graph


def timed(fn, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    shape = Shape(layers=args.layers)
    _, weights = make_weights(shape)

    rows = []
    for flash in (True, False):
        nodes = build_decode_graph(shape, weights, flash)[1].n_nodes
        samples = timed(lambda flash=flash: build_decode_graph(shape, weights, flash), args.repeat)
        rows.append((f"{shape.layers}-layer decode graph, flash attn {'on' if flash else 'off'}",
                     statistics.median(samples), f"{nodes} nodes"))

    n = 100_000
    start = time.perf_counter()
    for _ in range(n):
        lib.ggml_tensor_overhead()
    rows.append(("trivial binding call (ggml_tensor_overhead)",
                 (time.perf_counter() - start) / n, "cffi call"))
    with pyggml.Context(max_tensors=n + 8) as ctx:
        x = ctx.new_tensor("F32", (8,))
        start = time.perf_counter()
        for _ in range(n):
            x.scale(1.0)
        rows.append(("one Tensor op (x.scale(1.0))", (time.perf_counter() - start) / n,
                     "guarded call + Tensor"))

    width = max(len(r[0]) for r in rows)
    print(f"{'what':<{width}}  {'median time':>12}  note")
    for what, seconds, note in rows:
        value = f"{seconds * 1e3:.3f} ms" if seconds >= 1e-4 else f"{seconds * 1e9:.0f} ns"
        print(f"{what:<{width}}  {value:>12}  {note}")


if __name__ == "__main__":
    main()
