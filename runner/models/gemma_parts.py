"""What Gemma 3n and Gemma 4 share: per-layer inputs (a token's own small embedding per
layer and a projection of its embedding) and KV sharing (the last layers keep no cache and
read the last cached layer of their kind)."""

from __future__ import annotations

from collections.abc import Sequence

from .base import ATTENTION, Metadata, ModelError


def per_layer_inputs(table, projection, norm, inputs, x, layers: int, width: int,
                     eps: float):
    """(L, T, P): each layer's input from the per-layer embeddings table (vocab, L * P) at
    the inputs' tokens (T,) and projection (L * P, E) of the embeddings x (T, E), RMS-normed
    by norm (P,); the two summed and scaled by 1/sqrt(2)."""
    n, embd = x.shape
    own = inputs.lookup(table).scale(width ** 0.5).reshape(n, layers, width)      # (T, L, P)
    projected = projection.mul_mat(x).scale(embd ** -0.5) \
        .reshape(n, layers, width).rms_norm(eps).mul(norm)
    return projected.add(own).scale(2 ** -0.5).permute(1, 0, 2).cont()           # (L, T, P)


def check_shared_layers(m: Metadata, shared: int, layers: int) -> None:
    """Some layers keep a cache of their own (the first one at least)."""
    if shared >= layers:
        raise m.malformed(ATTENTION.SHARED_KV_LAYERS, shared, "not fewer than the "
                          f"model's {layers} layers (one at least must keep a cache)")


def cache_donor(layer: int, cached_layers: int, sliding: Sequence[bool], family: str) -> int:
    """The layer whose cache `layer` reads: itself when it keeps one (layer < cached_layers),
    else the last cached layer of its kind (sliding or full)."""
    if layer < cached_layers:
        return layer
    donors = [i for i in range(cached_layers) if sliding[i] == sliding[layer]]
    if not donors:
        raise ModelError(f"{family}'s layer {layer} shares the cache of an earlier layer of "
                         "its kind, and there is none.")
    return donors[-1]
