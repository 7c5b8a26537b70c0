"""Mixture-of-experts feed-forward layers as llama.cpp's build_moe_ffn computes them: a
router's scores (softmax or sigmoid), optionally a bias that only steers the choice and a
limit to the best groups of experts, the top k, their weights renormalised and scaled, and
each chosen expert a SwiGLU through mul_mat_id."""

from __future__ import annotations

from dataclasses import dataclass

# llama.cpp's floor under the sum of the chosen experts' weights before dividing by it
WEIGHT_SUM_FLOOR = 6.103515625e-5


@dataclass(frozen=True)
class Routing:
    experts: int                 # experts per layer
    used: int                    # experts per token
    gating: str = "softmax"      # or "sigmoid", or "softmax_weight": choose by the raw
    #                              logits, weigh by a softmax over the chosen ones (gpt-oss)
    normalize: bool = True       # the chosen weights divided by their sum
    scale: float = 1.0           # then multiplied by this
    groups: int = 1              # experts in groups, of which the best groups_used compete
    groups_used: int = 1


def route(routing: Routing, logits, bias=None):
    """logits (T, X) -> (chosen experts (T, K) int32, their weights (T, K, 1)). bias (X,):
    added to the scores to choose, not to weigh (DeepSeek V3's score correction)."""
    n, r = logits.shape[0], routing
    if r.gating == "softmax_weight":
        chosen = logits.top_k(r.used)                                    # (T, K) int32
        picked = logits.reshape(n, r.experts, 1).get_rows(chosen)        # (T, K, 1)
        return chosen, picked.reshape(n, r.used).soft_max().reshape(n, r.used, 1)
    probs = logits.sigmoid() if r.gating == "sigmoid" else logits.soft_max()  # (T, X)
    selection = probs if bias is None else probs.add(bias)
    if r.groups > 1:
        selection = _best_groups(selection, r)
    chosen = selection.top_k(r.used)                                     # (T, K) int32
    weights = probs.reshape(n, r.experts, 1).get_rows(chosen)            # (T, K, 1)
    if r.normalize:
        total = weights.reshape(n, -1).sum_rows().clamp(WEIGHT_SUM_FLOOR, float("inf"))
        weights = weights.div(total.reshape(n, 1, 1))
    if r.scale != 1.0:
        weights = weights.scale(r.scale)
    return chosen, weights


def _best_groups(selection, r: Routing):
    """selection (T, X) with every expert outside the groups_used best groups at -inf; a
    group's score is the sum of its two best experts' (DeepSeek V3's, and llama.cpp's for
    every model with groups)."""
    n, per_group = selection.shape[0], r.experts // r.groups
    grouped = selection.reshape(n, r.groups, per_group)                   # (T, G, X/G)
    best = grouped.top_k(2)                                               # (T, G, 2)
    pairs = grouped.reshape(n, r.groups, per_group, 1).get_rows(best)     # (T, G, 2, 1)
    scores = pairs.reshape(n, r.groups, 2).sum_rows().reshape(n, r.groups)  # (T, G)
    kept = scores.top_k(r.groups_used)                                    # (T, U)
    rows = grouped.get_rows(kept)                                         # (T, U, X/G)
    masked = grouped.scale(0.0, bias=float("-inf")).set_rows(rows, kept)  # (T, G, X/G)
    return masked.reshape(n, r.experts)


def swiglu_experts(gate_exps, up_exps, down_exps, h, chosen, weights):
    """h (T, E) through the chosen experts (T, K), each a SwiGLU of weights (X, F, E),
    (X, F, E), (X, E, F) -> their outputs' sum by weights (T, K, 1): (T, E)."""
    n, embd = h.shape
    routed = h.reshape(n, 1, embd)
    gate = gate_exps.mul_mat_id(routed, chosen)                          # (T, K, F)
    up = up_exps.mul_mat_id(routed, chosen)
    out = down_exps.mul_mat_id(gate.swiglu(up), chosen)                  # (T, K, E)
    return weighted_sum(out, weights)


def weighted_sum(out, weights):
    """out (T, K, E) and weights (T, K, 1) -> (T, E): the weighted outputs of the K experts
    added one after the other, each a view of its rows, in llama.cpp's order and without a
    copy (a transposed copy summed by rows streams every value twice more)."""
    weighted = out.mul(weights)                                          # (T, K, E)
    n, k, embd = weighted.shape
    row, expert, item = weighted.strides
    total = weighted.view((n, embd), strides=(row, item))                # expert 0's (T, E)
    for i in range(1, k):
        total = total.add(weighted.view((n, embd), offset=i * expert, strides=(row, item)))
    return total if k > 1 else total.cont()
