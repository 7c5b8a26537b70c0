"""Tiny llama-shaped GGUF files written at test time (random F32 weights), and a numpy
forward pass over their tensors written from the formulas."""

from __future__ import annotations

import gguf
import numpy as np

SHAPE = dict(embd=32, ffn=64, heads=4, kv_heads=2, vocab=64, layers=2)


def llama_tensors(rng, layers=SHAPE["layers"]):
    e, f, h, kvh, v = (SHAPE[k] for k in ("embd", "ffn", "heads", "kv_heads", "vocab"))
    d = e // h
    w = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)
    tensors = {"token_embd.weight": w(v, e), "output_norm.weight": 1 + w(e) * 0.1,
               "output.weight": w(v, e)}
    for i in range(layers):
        tensors.update({
            f"blk.{i}.attn_norm.weight": 1 + w(e) * 0.1, f"blk.{i}.attn_q.weight": w(h * d, e),
            f"blk.{i}.attn_k.weight": w(kvh * d, e), f"blk.{i}.attn_v.weight": w(kvh * d, e),
            f"blk.{i}.attn_output.weight": w(e, h * d), f"blk.{i}.ffn_norm.weight": 1 + w(e) * 0.1,
            f"blk.{i}.ffn_gate.weight": w(f, e), f"blk.{i}.ffn_up.weight": w(f, e),
            f"blk.{i}.ffn_down.weight": w(e, f)})
    return tensors


def write_llama(path, tensors, arch="llama", rope_base=10000.0, extra=None, tokenizer=None):
    """tokenizer: dict(tokens, merges, types, pre) for a real BPE vocabulary, or with
    model="t5": dict(model, tokens, scores, types, charsmap, space_prefix,
    remove_extra_whitespaces, unk) for a Unigram one."""
    writer = gguf.GGUFWriter(str(path), arch)
    layers = sum(1 for name in tensors if name.endswith("attn_norm.weight"))
    writer.add_block_count(layers)
    writer.add_context_length(256)
    writer.add_embedding_length(SHAPE["embd"])
    writer.add_feed_forward_length(SHAPE["ffn"])
    writer.add_head_count(SHAPE["heads"])
    writer.add_head_count_kv(SHAPE["kv_heads"])
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(rope_base)
    writer.add_tokenizer_model((tokenizer or {}).get("model", "gpt2"))
    if tokenizer is None:
        writer.add_tokenizer_pre("gpt-2")
        writer.add_token_list([chr(c) for c in range(33, 33 + SHAPE["vocab"])])
        writer.add_token_merges([])
    elif tokenizer.get("model") == "t5":
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokenizer["tokens"])
        writer.add_token_scores(tokenizer["scores"])
        writer.add_token_types(tokenizer["types"])
        writer.add_add_space_prefix(tokenizer["space_prefix"])
        writer.add_remove_extra_whitespaces(tokenizer["remove_extra_whitespaces"])
        writer.add_precompiled_charsmap(tokenizer["charsmap"])
        writer.add_unk_token_id(tokenizer["unk"])
        writer.add_eos_token_id(tokenizer["eos"])
    else:
        writer.add_tokenizer_pre(tokenizer["pre"])
        writer.add_token_list(tokenizer["tokens"])
        writer.add_token_merges(tokenizer["merges"])
        writer.add_token_types(tokenizer["types"])
        writer.add_bos_token_id(0)
        writer.add_eos_token_id(1)
        writer.add_vocab_size(len(tokenizer["tokens"]))
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    for key, value in (extra or {}).items():
        if isinstance(value, int):
            writer.add_uint32(key, value)
        else:
            writer.add_float32(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def rms_norm(x, w, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope(x, pos, base, factors=None):
    """x (T, H, D): rotate pairs (2i, 2i+1) by pos * base^(-2i/D) / factor_i."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2) / d)
    if factors is not None:
        inv = inv / factors
    angle = pos[:, None, None] * inv[None, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * np.cos(angle) - b * np.sin(angle)
    out[..., 1::2] = a * np.sin(angle) + b * np.cos(angle)
    return out


def reference_logits(t, ids, base, factors=None):
    return reference_hidden(t, ids, base, factors) @ t["output.weight"].T


def reference_hidden(t, ids, base, factors=None):
    """(T, E) final hidden states after the output norm."""
    e, h, kvh = SHAPE["embd"], SHAPE["heads"], SHAPE["kv_heads"]
    d, n = e // h, len(ids)
    pos = np.arange(n, dtype=np.float64)
    x = t["token_embd.weight"][ids].astype(np.float64)
    causal = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(SHAPE["layers"]):
        p = lambda name, i=i: t[f"blk.{i}.{name}.weight"].astype(np.float64)
        hn = rms_norm(x, p("attn_norm"))
        q = rope((hn @ p("attn_q").T).reshape(n, h, d), pos, base, factors)
        k = rope((hn @ p("attn_k").T).reshape(n, kvh, d), pos, base, factors)
        v = (hn @ p("attn_v").T).reshape(n, kvh, d)
        k, v = np.repeat(k, h // kvh, axis=1), np.repeat(v, h // kvh, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d) + causal
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", probs, v).reshape(n, e)
        x = x + attn @ p("attn_output").T
        hn = rms_norm(x, p("ffn_norm"))
        gate = hn @ p("ffn_gate").T
        x = x + ((gate / (1 + np.exp(-gate))) * (hn @ p("ffn_up").T)) @ p("ffn_down").T
    return rms_norm(x, t["output_norm.weight"])
