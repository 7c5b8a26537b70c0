"""Rotary position embeddings as GGUF metadata describes them: the base, the rotated
dimensions, and linear or YaRN scaling, applied through ggml's rope_ext as llama.cpp does.
Every model with RoPE reads its own (a model may have several: Gemma's sliding and global
layers).

M-RoPE (Qwen-VL's text models): rope.dimension_sections gives each axis of a position
(time, row, column) its share of a head's rotated pairs, and positions arrive as
AXES x T values (ggml's rope_multi); a text token's axes are all its position, which is
NEOX's rope, so a context shift (every axis moved alike) rotates as NEOX does."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .base import LLM, ROPE, Metadata, ModelError

AXES = 4                    # positions per token with M-RoPE (ggml's rope_multi reads four)
OLLAMA_SECTIONS = "rope.mrope_section"          # Ollama's qwen25vl files' name for them
# the text model's rope mode -> its multi-axis mode (sections laid out as one block per
# axis, or interleaved as Qwen3-VL's)
MULTI_MODES = {"neox": "mrope"}


def yarn_attn_factor(factor: float, log_mul: float = 0.0) -> float:
    """llama.cpp's YaRN attention factor before the file's: its magnitude scale 1 + 0.1 ln s
    times the inverse that ggml's rope multiplies back in, computed in float32 as it does (a
    hair from 1). With a yarn_log_multiplier (Mistral 3: its mscale_all_dim) the magnitude
    is divided by 1 + 0.1 * log_mul * ln s, as transformers divides by that mscale."""
    f32 = np.float32
    scale = f32(1) / f32(f32(1) / f32(factor))
    mscale = f32(0.1) * np.log(scale) + f32(1) if scale > 1 else f32(1)
    if log_mul:
        mscale = mscale / (f32(0.1) * f32(log_mul) * np.log(scale) + f32(1))
    return float(mscale * (f32(1) / (f32(1) + f32(0.1) * np.log(scale))))


@dataclass
class RopeConfig:
    dims: int
    base: float
    freq_scale: float = 1.0
    ext_factor: float = 0.0
    attn_factor: float = 1.0
    original_context: int = 0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    sections: tuple = ()            # M-RoPE: rotated pairs per axis (AXES values)
    interleaved: bool = False       # M-RoPE's axes interleaved over the pairs (Qwen3-VL)

    @classmethod
    def from_metadata(cls, m: Metadata, dims: int, base_default: float,
                      head: int | None = None) -> "RopeConfig":
        """dims: the rotated dimensions where the file does not say; head: the head they lie
        in (dims by default)."""
        kind = m.get(ROPE.SCALING_TYPE, "none")
        factor = float(m.get(ROPE.SCALING_FACTOR, 1.0)) or 1.0
        rope = cls(dims=int(m.get(ROPE.DIMENSION_COUNT, dims)),
                   base=float(m.get(ROPE.FREQ_BASE, base_default)),
                   original_context=int(m.get(ROPE.SCALING_ORIG_CTX_LEN, 0)
                                        or m.get(LLM.CONTEXT_LENGTH, 0)),
                   attn_factor=float(m.get(ROPE.SCALING_ATTN_FACTOR, 1.0)))
        sections = m.get(ROPE.DIMENSION_SECTIONS, array=True) or \
            m.get(OLLAMA_SECTIONS, array=True)
        if sections:
            rope.sections = tuple(sections if isinstance(sections, list) else [sections])[:AXES]
            rope.sections += (0,) * (AXES - len(rope.sections))
        with np.errstate(all="ignore"):       # a factor float32 cannot hold: check()'s
            if kind in ("linear", "yarn"):
                rope.freq_scale = float(np.float32(1) / np.float32(factor))  # as llama.cpp
            if kind == "yarn":
                rope.ext_factor = float(m.get(ROPE.SCALING_YARN_EXT_FACTOR, 1.0))
                rope.attn_factor *= yarn_attn_factor(
                    factor, float(m.get(ROPE.SCALING_YARN_LOG_MUL, 0.0)))
                rope.beta_fast = float(m.get(ROPE.SCALING_YARN_BETA_FAST, 32.0))
                rope.beta_slow = float(m.get(ROPE.SCALING_YARN_BETA_SLOW, 1.0))
        rope.check(m, dims if head is None else head)
        return rope

    def check(self, m: Metadata, head: int, key: str = ROPE.DIMENSION_COUNT) -> None:
        """What ggml's rope asserts (pairs of dimensions within the head; M-RoPE sections
        that give some axis a share) and a usable scale, naming the key (key: the one that
        gives dims). A head without dimensions is its config's to refuse."""
        if head < 1:
            return
        if not m.has(key) and self.dims % 2:
            raise ModelError(f"The head has {self.dims} dimensions, an odd number, and the "
                             f"file gives no {m.name(key)} for the rope to turn fewer, in "
                             "pairs; the file is malformed.")
        if self.dims % 2:
            raise m.malformed(key, self.dims, "an odd number, but the rope turns pairs of "
                              "dimensions")
        if self.dims > head:
            raise m.malformed(key, self.dims, f"larger than the head ({head})")
        if not (math.isfinite(self.freq_scale) and self.freq_scale > 0):
            raise m.malformed(ROPE.SCALING_FACTOR, m.get(ROPE.SCALING_FACTOR),
                              "too small to scale positions by")
        if self.sections and not any(self.sections[:3]):
            key = ROPE.DIMENSION_SECTIONS if m.has(ROPE.DIMENSION_SECTIONS) else OLLAMA_SECTIONS
            raise m.malformed(key, list(self.sections), "which gives none of the axes of a "
                              "position a share of the rotated pairs")

    @property
    def axes(self) -> int:
        """Positions per token the rope reads."""
        return AXES if self.sections else 1

    def apply(self, x, positions, mode: str, freq_factors=None):
        """x (T, H, D) rotated at positions (T,), or (AXES * T,) with sections."""
        if self.sections:
            multi = "imrope" if self.interleaved else MULTI_MODES[mode]
            return x.rope_multi(positions, self.dims, self.sections, multi,
                                freq_factors=freq_factors, freq_base=self.base,
                                freq_scale=self.freq_scale, n_ctx_orig=self.original_context,
                                ext_factor=self.ext_factor, attn_factor=self.attn_factor,
                                beta_fast=self.beta_fast, beta_slow=self.beta_slow)
        return x.rope_ext(positions, self.dims, mode, freq_factors=freq_factors,
                          freq_base=self.base,
                          freq_scale=self.freq_scale, n_ctx_orig=self.original_context,
                          ext_factor=self.ext_factor, attn_factor=self.attn_factor,
                          beta_fast=self.beta_fast, beta_slow=self.beta_slow)

    def shift(self, x, deltas, mode: str, freq_factors=None):
        """Rotate cached keys x by position deltas: a pure rotation. ggml's YaRN multiplies
        magnitudes by 1 + 0.1 ln(1 / freq_scale) at every rope; keys were scaled once, as
        they were cached, so the shift divides that back out (llama.cpp does so for
        deepseek2 only; its other models' keys grow by YaRN's magnitude at each shift)."""
        neutral = 1.0
        if self.ext_factor:
            f32 = np.float32
            neutral = float(f32(1) / (f32(1) + f32(0.1) * np.log(f32(1) / f32(self.freq_scale))))
        return replace(self, attn_factor=neutral, sections=()).apply(x, deltas, mode,
                                                                     freq_factors)
