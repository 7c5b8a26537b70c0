"""Sampling options (Ollama's names) and their validation."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields


@dataclass
class SamplingOptions:
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.9
    min_p: float = 0.0
    seed: int | None = None             # None or negative: random
    repeat_penalty: float = 1.0         # llama.cpp's default (Ollama's is 1.1)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_last_n: int = 64
    logit_bias: dict | None = None      # token id -> added to its logit (OpenAI's, -100..100)

    def __post_init__(self):
        for name, (low, high, kind) in LIMITS.items():
            value = getattr(self, name)
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{name} must be an integer, not {value!r}.")
            if kind is float:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"{name} must be a number, not {value!r}.")
                if not math.isfinite(value):
                    raise ValueError(f"{name} must be a finite number, not {value!r}.")
            if value < low or (high is not None and value > high) or \
                    (name in ABOVE_LOW and value == low):
                bound = f"[{low}, {high}]" if high is not None else \
                    f"> {low}" if name in ABOVE_LOW else f">= {low}"
                raise ValueError(f"{name} must be {bound}, not {value!r}.")
        if self.seed is not None and (isinstance(self.seed, bool) or
                                      not isinstance(self.seed, int)):
            raise ValueError(f"seed must be an integer, not {self.seed!r}.")
        if self.seed is not None and self.seed < 0:
            self.seed = None                  # Ollama's -1: a random seed
        if self.logit_bias is not None:
            self.logit_bias = _biases(self.logit_bias)

    @property
    def penalized(self) -> bool:
        """Whether the logits of recent tokens are changed before sampling."""
        return self.repeat_penalty != 1.0 or bool(self.presence_penalty) or \
            bool(self.frequency_penalty)

    @property
    def reshaped(self) -> bool:
        """Whether the logits are changed before sampling (penalties, biases)."""
        return self.penalized or bool(self.logit_bias)

    @property
    def greedy(self) -> bool:
        """The token is always the largest logit (no temperature, no penalties)."""
        return self.temperature == 0 and not self.reshaped

    @classmethod
    def from_dict(cls, options: dict) -> "SamplingOptions":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in options.items() if k in known})


def _biases(given) -> dict[int, float]:
    """OpenAI's logit_bias ({"token id": bias}) as ints to floats in [-100, 100]."""
    if not isinstance(given, dict):
        raise ValueError(f"logit_bias must map token ids to biases, not {given!r}.")
    found = {}
    for token, bias in given.items():
        try:
            token = int(token)
        except (TypeError, ValueError):
            raise ValueError(f"logit_bias keys are token ids, not {token!r}.") from None
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or \
                not -100 <= bias <= 100 or token < 0:
            raise ValueError(f"logit_bias maps token ids to numbers in [-100, 100], not "
                             f"{token}: {bias!r}.")
        found[token] = float(bias)
    return found


ABOVE_LOW = {"repeat_penalty"}      # 0 would divide logits by zero
# option -> (lowest, highest or None, type)
LIMITS = {
    "temperature": (0.0, None, float),
    "top_k": (0, None, int),
    "top_p": (0.0, 1.0, float),
    "min_p": (0.0, 1.0, float),
    "repeat_penalty": (0.0, None, float),
    "presence_penalty": (-2.0, 2.0, float),
    "frequency_penalty": (-2.0, 2.0, float),
    "repeat_last_n": (-1, None, int),
}
