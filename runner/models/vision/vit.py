"""The vision transformer that SigLIP and CLIP towers share: patch embedding (a linear map of
each patch's pixels, the conv kernel read as a matrix), learned positions, pre-LayerNorm
blocks with biased attention and a two-layer MLP, as llama.cpp's mmproj files name them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gguf

import pyggml

from ..base import Block, Metadata, ModelError, Weights, weight
from .pixels import Pixels

VISION = gguf.Keys.ClipVision
ACTIVATIONS = {"gelu": "gelu", "silu": "silu", "gelu_quick": "gelu_quick"}


@dataclass
class ViTConfig:
    embd: int
    ffn: int
    heads: int
    layers: int
    image_size: int
    patch: int
    eps: float
    projection: int              # the text model's embedding width
    mean: tuple[float, ...]
    std: tuple[float, ...]
    activation: str              # of the MLP, as clip.use_gelu / use_silu say (else quick GELU)

    @classmethod
    def from_metadata(cls, meta: dict) -> "ViTConfig":
        m = Metadata(meta, "clip")
        activation = "gelu" if m.get(VISION.USE_GELU) else \
            "silu" if m.get(VISION.USE_SILU) else "gelu_quick"
        return cls(embd=int(m.require(VISION.EMBEDDING_LENGTH)),
                   ffn=int(m.require(VISION.FEED_FORWARD_LENGTH)),
                   heads=int(m.require(VISION.Attention.HEAD_COUNT)),
                   layers=int(m.require(VISION.BLOCK_COUNT)),
                   image_size=int(m.require(VISION.IMAGE_SIZE)),
                   patch=int(m.require(VISION.PATCH_SIZE)),
                   eps=float(m.require(VISION.Attention.LAYERNORM_EPS)),
                   projection=int(m.require(VISION.PROJECTION_DIM)),
                   mean=tuple(float(x) for x in m.require(VISION.IMAGE_MEAN)),
                   std=tuple(float(x) for x in m.require(VISION.IMAGE_STD)),
                   activation=activation)

    @property
    def head_dim(self) -> int:
        return self.embd // self.heads


@dataclass
class ViTBlock(Block):
    """v.blk.N: each weight with its bias (<name>.bias as <name>_b)."""
    ln1: pyggml.Tensor = weight()
    ln1_b: pyggml.Tensor = weight()
    attn_q: pyggml.Tensor = weight()
    attn_q_b: pyggml.Tensor = weight()
    attn_k: pyggml.Tensor = weight()
    attn_k_b: pyggml.Tensor = weight()
    attn_v: pyggml.Tensor = weight()
    attn_v_b: pyggml.Tensor = weight()
    attn_out: pyggml.Tensor = weight()
    attn_out_b: pyggml.Tensor = weight()
    ln2: pyggml.Tensor = weight()
    ln2_b: pyggml.Tensor = weight()
    ffn_up: pyggml.Tensor = weight()
    ffn_up_b: pyggml.Tensor = weight()
    ffn_down: pyggml.Tensor = weight()
    ffn_down_b: pyggml.Tensor = weight()


def bind_blocks(weights: Weights, c: ViTConfig, layers: int) -> list[ViTBlock]:
    """v.blk.N: ln1, attn_q/k/v/out, ln2, ffn_up, ffn_down, each with a bias."""
    blocks = []
    for i in range(layers):
        e, f, prefix = c.embd, c.ffn, f"v.blk.{i}."
        shapes = {"ln1": (e,), "attn_q": (e, e), "attn_k": (e, e), "attn_v": (e, e),
                  "attn_out": (e, e), "ln2": (e,), "ffn_up": (f, e), "ffn_down": (e, f)}
        block = ViTBlock()
        for name, shape in shapes.items():
            setattr(block, name, weights.take(f"{prefix}{name}.weight", shape))
        for name, shape in shapes.items():
            setattr(block, f"{name}_b", weights.take(f"{prefix}{name}.bias", shape[:1]))
        blocks.append(block)
    return blocks


def patch_matrix(weights: Weights, c: ViTConfig):
    """v.patch_embd (D, 3, p, p) as the matrix (D, 3*p*p) that maps a patch's pixels, laid out
    channel, row, column as Pixels.patches are."""
    kernel = weights.take("v.patch_embd.weight", (c.embd, 3, c.patch, c.patch))
    if not kernel.is_contiguous:
        raise ModelError("v.patch_embd.weight is not stored contiguously.")
    return kernel


def embed_patches(patches, kernel, c: ViTConfig):
    """patches (P, 3*p*p) -> (P, D): the conv kernel (D, 3, p, p) as a matrix (bound into the
    graph's context, where a weight alone can be reshaped)."""
    matrix = patches.context.bind(kernel).reshape(c.embd, 3 * c.patch * c.patch)
    return matrix.mul_mat(patches)


def as_f32(weight, ctx):
    """weight as F32 in ctx's graph (a table stored F16 is added to F32 activations)."""
    bound = ctx.bind(weight)
    return bound if bound.dtype == pyggml.F32 else bound.cast("F32")


def square_pixels(planes, c: ViTConfig, rows: int) -> Pixels:
    """The Pixels of planes (3, S, S) at the tower's own size S."""
    side = c.image_size // c.patch
    return Pixels(patchify(planes, c.patch), (side, side), rows)


def patchify(planes, patch: int):
    """(3, H, W) pixels -> (H/p * W/p, 3*p*p) patches in row-major order, each laid out
    channel, row, column (as the conv kernel is)."""
    _, height, width = planes.shape
    rows, cols = height // patch, width // patch
    return planes.reshape(3, rows, patch, cols, patch).transpose(1, 3, 0, 2, 4) \
        .reshape(rows * cols, 3 * patch * patch)


def layer_norm(x, weight, bias, eps: float):
    return x.norm(eps).mul(weight).add(bias)


def encoder_block(x, block: ViTBlock, c: ViTConfig, flash: bool = False):
    """One pre-LayerNorm block over x (P, D), every position attending to every other."""
    n = x.shape[0]
    h = layer_norm(x, block.ln1, block.ln1_b, c.eps)
    q = block.attn_q.mul_mat(h).add(block.attn_q_b).reshape(n, c.heads, c.head_dim)
    k = block.attn_k.mul_mat(h).add(block.attn_k_b).reshape(n, c.heads, c.head_dim)
    v = block.attn_v.mul_mat(h).add(block.attn_v_b).reshape(n, c.heads, c.head_dim)
    a = attend_all(q, k, v, 1.0 / math.sqrt(c.head_dim), flash)          # (P, D)
    x = x.add(block.attn_out.mul_mat(a).add(block.attn_out_b))
    h = layer_norm(x, block.ln2, block.ln2_b, c.eps)
    h = getattr(block.ffn_up.mul_mat(h).add(block.ffn_up_b), ACTIVATIONS[c.activation])()
    return x.add(block.ffn_down.mul_mat(h).add(block.ffn_down_b))


def attend_all(q, k, v, scale: float, flash: bool = False, mask=None):
    """Attention of every patch to every other: q, k, v (P, H, d) -> (P, H * d); mask
    (P, P), F16 with flash, adds to the scores. flash: ggml's fused kernel over F16 keys and
    values (as llama.cpp's clip with flash attention), never the P x P scores."""
    n, heads, dim = q.shape
    if flash:
        keys = k.permute(1, 0, 2).cast("F16")                            # (H, P, d)
        values = v.permute(1, 0, 2).cast("F16")
        out = q.permute(1, 0, 2).flash_attn_ext(keys, values, mask, scale)   # (P, H, d)
        out = out.accumulate_in_f32()               # as llama.cpp's clip asks of the GPUs
        return out.reshape(n, heads * dim)
    queries = q.permute(1, 0, 2)                                         # (H, P, d)
    keys = k.permute(1, 0, 2)                                            # (H, P, d)
    values = v.permute(1, 2, 0).cont()                                   # (H, d, P)
    probs = keys.mul_mat(queries).soft_max(mask, scale)                  # (H, P, P)
    out = values.mul_mat(probs).permute(1, 0, 2).cont()                  # (P, H, d)
    return out.reshape(n, heads * dim)


def rope_halves(x, first, second, mode: str, base: float, second_scale: float = 1.0):
    """2-D RoPE as llama.cpp's build_rope_2d: x (P, H, d), the first half of each head
    rotated (mode "neox" or "normal", over d/2 dimensions) by first's positions, the second
    half by second's, its angles scaled by second_scale."""
    n, heads, d = x.shape
    half = d // 2
    parts = []
    for index, (positions, scale) in enumerate(((first, 1.0), (second, second_scale))):
        part = x.view((n, heads, half), offset=index * half * x.strides[-1], strides=x.strides)
        parts.append(part.rope_ext(positions, half, mode, freq_base=base, freq_scale=scale))
    return parts[0].concat(parts[1], -1)
