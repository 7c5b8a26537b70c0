"""Scaled dot-product attention through the KV cache, with or without flash attention."""

from __future__ import annotations


def temperature(positions, n: int, length: int, scale: float, offset: float = 0.0):
    """Llama 4's attention temperature, queries' multiplier (T, 1, 1):
    ln(floor((pos + offset) / length) + 1) * scale + 1 (Llama 4: offset 1; Mistral 3: 0)."""
    steps = positions.cast("F32").scale(1.0 / length, bias=offset / length).floor()
    return steps.scale(1.0, bias=1.0).log().scale(scale, bias=1.0).reshape(n, 1, 1)


def attention(kv, layer: int, q, k, v, scale: float, window: int | None = None,
              softcap: float = 0.0, values_out=None, sinks=None):
    """q (T, H, D), k (T, KVH, D), v (T, KVH, Dv) -> (T, H * Dv), after storing k and v.
    values_out (H, Do, Dv): each head's output projected (DeepSeek's latent values)
    -> (T, H * Do). sinks (H,): per head a logit that joins the softmax and takes its share
    of the weight to no value (gpt-oss)."""
    k_node, v_node = kv.put(layer, k, v)
    return attend(kv, layer, q, k_node, v_node, scale, window, softcap,
                  values_out=values_out, sinks=sinks)


def attend(kv, layer: int, q, k_node, v_node, scale: float, window: int | None = None,
           softcap: float = 0.0, mask=None, values_out=None, sinks=None):
    """q (T, H, D) against cache layer `layer`, read through the nodes of its write
    (kv.put's result; a layer that shares another's cache passes that layer's nodes)
    -> (T, H * Dv). mask: the rows of kv.mask(window) for these queries, when they are
    not all the batch's tokens. values_out, sinks: as attention's. In streams (a batch of
    S sequences' decode steps, kv.streams), each sequence's tokens meet only the cells of
    its own region, a group of evenly spaced sequences at a time (kv.groups)."""
    n_tokens, heads = q.shape[0], q.shape[1]
    own = kv.mask(window, layer)                                  # checks layer's window
    queries = kv.queries(layer, q)                                # (T, H, D)
    if not kv.streams:
        out = _attend(kv, queries.permute(1, 0, 2), kv.keys(layer, k_node),    # (H, T, D)
                      kv.values(layer, v_node), own if mask is None else mask, scale,
                      softcap, values_out, sinks)
        return kv.output(layer, out.reshape(n_tokens, heads * out.shape[-1]))
    if mask is not None or values_out is not None:
        raise ValueError("Attention in streams takes every token's queries and values of "
                         "their own size; this model must not attend in streams.")
    t, outs, row = n_tokens // kv.streams, [], 0
    for group, (_, count, _) in enumerate(kv.groups):
        # the group's S sequences of t tokens each: (S, H, t, D) against (S, KVH, n_kv, D)
        mine = _rows(queries, row * t, count * t).reshape(count, t, heads, -1)
        out = _attend(kv, mine.permute(0, 2, 1, 3), kv.keys(layer, k_node, group),
                      kv.values(layer, v_node, group),
                      _rows(own, row * t, count * t).reshape(count, 1, t, own.shape[-1]),
                      scale, softcap, None, sinks)
        outs.append(out.reshape(count * t, heads * out.shape[-1]))
        row += count
    out = outs[0]
    for more in outs[1:]:
        out = out.concat(more, axis=0)                            # (T, H * Dv)
    return kv.output(layer, out)


def _rows(tensor, start: int, n: int):
    """Rows [start, start + n) of tensor: a view, or tensor itself where that is all of it."""
    if start == 0 and n == tensor.shape[0]:
        return tensor
    return tensor.view((n, *tensor.shape[1:]), offset=start * tensor.strides[0],
                       strides=tensor.strides)


def _attend(kv, queries, keys, values, mask, scale: float, softcap: float, values_out, sinks):
    """queries (H, T, D) against keys (KVH, n_kv, D) and values, or in streams (S, H, t, D)
    against (S, KVH, n_kv, D) -> (T, H, Dv) (streams: (S, t, H, Dv)), contiguous."""
    # scores summed in float32 on every device, as llama.cpp asks (a GPU's float16 sums
    # overflow or lose the scores of models with large activations)
    streams = queries.ndim == 4
    if kv.cache.flash:
        out = queries.flash_attn_ext(keys, values, mask, scale, logit_softcap=softcap,
                                     sinks=sinks).accumulate_in_f32()  # (T, H, Dv)
        if values_out is not None:
            out = values_out.mul_mat(out.permute(1, 0, 2)).permute(1, 0, 2)  # (T, H, Do)
    else:
        scores = keys.mul_mat(queries).accumulate_in_f32()       # (H, T, n_kv)
        if softcap:
            scores = scores.scale(scale / softcap).tanh().scale(softcap)
            scale = 1.0
        probs = scores.soft_max(mask, scale, sinks=sinks)         # (H, T, n_kv)
        out = values.mul_mat(probs)                               # (H, T, Dv)
        if values_out is not None:
            out = values_out.mul_mat(out)                         # (H, T, Do)
        out = out.permute(0, 2, 1, 3) if streams else out.permute(1, 0, 2)   # (T, H, Dv)
    return out if out.is_contiguous else out.cont()              # flash output already is
