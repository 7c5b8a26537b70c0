"""The hyper-parameters every converted architecture shares: read from config.json,
written under llama.cpp's keys, and the tensor shapes they imply."""

from __future__ import annotations

import math
from dataclasses import dataclass

import gguf
import numpy as np

from .checkpoint import CheckpointError

# rope scalings a config may ask for (llama3's and Gemma 4's proportional one become
# rope_freqs: extra_tensors, gemma4.py)
ROPE_SCALINGS = (None, "default", "linear", "llama3", "proportional", "yarn")
REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class Hyper:
    layers: int
    embd: int
    ffn: int | list[int]            # a list where it differs per layer (Gemma 4)
    heads: int
    kv_heads: int | list[int]       # ditto
    head_dim: int
    vocab: int
    context: int
    eps: float
    rope_theta: float
    rope_scaling: dict | None
    key_length: int | None = None   # where keys, values and rotated dimensions differ from
    value_length: int | None = None  # head_dim (DeepSeek's latent attention)
    rope_dims: int | None = None

    @classmethod
    def of(cls, c: dict) -> "Hyper":
        """From config.json; a key given as null is taken as absent (HF writes head_dim
        null, say, for "derived")."""
        c = {key: value for key, value in c.items() if value is not None}
        missing = [key for key in REQUIRED if key not in c]
        if "intermediate_size" not in c and "intermediate_size_mlp" not in c:
            missing.append("intermediate_size")
        if missing:
            raise CheckpointError(f"config.json lacks {', '.join(missing)}.")
        heads = c["num_attention_heads"]
        rope = c.get("rope_parameters") or {}
        rope = rope.get("full_attention", rope)          # per layer type (Gemma 3)
        scaling = c.get("rope_scaling") or (rope if rope.get("rope_type") not in
                                            (None, "default") else None)
        return cls(layers=c["num_hidden_layers"], embd=c["hidden_size"],
                   ffn=c.get("intermediate_size_mlp") or c["intermediate_size"],
                   heads=heads,
                   kv_heads=c.get("num_key_value_heads") or heads,
                   head_dim=c.get("head_dim") or c["hidden_size"] // heads,
                   vocab=c["vocab_size"], context=c.get("max_position_embeddings", 2048),
                   eps=c.get("rms_norm_eps", 1e-6),
                   rope_theta=c.get("rope_theta") or rope.get("rope_theta", 10000.0),
                   rope_scaling=scaling)


def write_hparams(writer: gguf.GGUFWriter, h: Hyper) -> None:
    writer.add_block_count(h.layers)
    writer.add_context_length(h.context)
    writer.add_embedding_length(h.embd)
    writer.add_feed_forward_length(h.ffn)
    writer.add_head_count(h.heads)
    writer.add_head_count_kv(h.kv_heads)
    writer.add_key_length(h.key_length or h.head_dim)
    writer.add_value_length(h.value_length or h.head_dim)
    writer.add_rope_dimension_count(h.rope_dims or h.head_dim)
    writer.add_rope_freq_base(float(h.rope_theta))
    writer.add_layer_norm_rms_eps(float(h.eps))
    writer.add_vocab_size(h.vocab)
    scaling = h.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind not in ROPE_SCALINGS:
        raise CheckpointError(f"Rope scaling {kind!r} is not supported; the converter knows "
                              f"{', '.join(k for k in ROPE_SCALINGS if k)}.")
    if kind == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(scaling["factor"]))
    elif kind == "yarn":
        write_yarn(writer, scaling, h)


def write_yarn(writer: gguf.GGUFWriter, scaling: dict, h: Hyper) -> None:
    """YaRN as llama.cpp reads it: factor, the original context, the betas where they are
    not its defaults, and an explicit attention factor as the part beyond YaRN's own
    1 + 0.1 ln(factor) (which ggml's rope applies itself). truncate is not written: ggml
    always rounds the correction range to whole dimensions (transformers' truncate true), and
    llama.cpp's converter converts truncate false (gpt-oss's released configs) so too
    (docs/models.md: what that costs against transformers)."""
    if "mscale" in scaling or "mscale_all_dim" in scaling:
        raise CheckpointError("YaRN with mscale (DeepSeek's) is not supported.")
    factor = float(scaling["factor"])
    writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(factor)
    writer.add_rope_scaling_orig_ctx_len(int(scaling.get("original_max_position_embeddings",
                                                         h.context)))
    if "beta_fast" in scaling:
        writer.add_rope_scaling_yarn_beta_fast(float(scaling["beta_fast"]))
    if "beta_slow" in scaling:
        writer.add_rope_scaling_yarn_beta_slow(float(scaling["beta_slow"]))
    if scaling.get("attention_factor") is not None:
        writer.add_rope_scaling_attn_factors(
            float(scaling["attention_factor"]) / (1 + 0.1 * math.log(factor)))


def extra_tensors(h: Hyper) -> dict[str, np.ndarray]:
    """Llama 3 rope scaling becomes per-frequency factors (rope_freqs), as llama.cpp does."""
    s = h.rope_scaling
    if not s or s.get("rope_type", s.get("type")) != "llama3":
        return {}
    factor = s["factor"]
    low, high = s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old_context = s.get("original_max_position_embeddings", 8192)
    freqs = 1.0 / h.rope_theta ** (np.arange(0, h.head_dim, 2) / h.head_dim)
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_context / high:
            factors.append(1.0)
        elif wavelen > old_context / low:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return {"rope_freqs.weight": np.array(factors, dtype=np.float32)}


def expected_shape(name: str, h: Hyper) -> tuple[int, ...] | None:
    """The shape (numpy order) the config implies for a GGUF tensor, or None if unknown."""
    # per-layer widths (lists) are resolved first by the architecture's own shape function
    assert isinstance(h.kv_heads, int) and isinstance(h.ffn, int)
    q, kv = h.heads * h.head_dim, h.kv_heads * h.head_dim
    base = name.split(".", 2)[-1] if name.startswith("blk.") else name
    return {
        "token_embd.weight": (h.vocab, h.embd), "output.weight": (h.vocab, h.embd),
        "output_norm.weight": (h.embd,), "attn_norm.weight": (h.embd,),
        "ffn_norm.weight": (h.embd,), "attn_q.weight": (q, h.embd),
        "attn_k.weight": (kv, h.embd), "attn_v.weight": (kv, h.embd),
        "attn_output.weight": (h.embd, q), "attn_q.bias": (q,), "attn_k.bias": (kv,),
        "attn_v.bias": (kv,), "attn_q_norm.weight": (h.head_dim,),
        "attn_k_norm.weight": (h.head_dim,), "post_attention_norm.weight": (h.embd,),
        "post_ffw_norm.weight": (h.embd,), "ffn_gate.weight": (h.ffn, h.embd),
        "ffn_up.weight": (h.ffn, h.embd), "ffn_down.weight": (h.embd, h.ffn),
    }.get(base)


def fused_shape(name: str, h: Hyper, config: dict) -> tuple[int, ...] | None:
    """expected_shape for checkpoints whose FFN gate and up are one tensor (ffn_up: the
    gate's rows, then up's) and whose Q, K and V may be (attn_qkv): Phi-3, GLM-4."""
    assert isinstance(h.kv_heads, int) and isinstance(h.ffn, int)
    base = name.split(".", 2)[-1] if name.startswith("blk.") else name
    if base == "ffn_up.weight":
        return (2 * h.ffn, h.embd)
    if base == "attn_qkv.weight":
        return ((h.heads + 2 * h.kv_heads) * h.head_dim, h.embd)
    return expected_shape(name, h)
