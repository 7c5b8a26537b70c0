"""The log-mel front end of Gemma 4's audio encoder, as Hugging Face's
Gemma4AudioFeatureExtractor computes it (in float64 numpy, the result float32):

samples padded with zeros to a multiple of 128; 160 zeros before them (semicausal); frames of
320 samples every 160 (the 321st sample only decides whether the frame is real audio), a
periodic Hann window, rfft of 512 points, magnitudes through 128 HTK mel filters (0 to
8 kHz, unnormalised), log(mel + 0.001). Frames whose last sample is padding are zeroed and
marked invalid. One second makes 99 frames.
"""

from __future__ import annotations

import math

import numpy as np

from ...multimodal.sound import MAX_SAMPLES, RATE

BINS = 128
FRAME = 320                # 20 ms
HOP = 160                  # 10 ms
FFT = 2 ** math.ceil(math.log2(FRAME))
PAD_MULTIPLE = 128
FLOOR = 1e-3


def hann(length: int) -> np.ndarray:
    """The periodic Hann window."""
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(length) / length)


def htk_mel(hz):
    return 2595.0 * np.log10(1.0 + np.asarray(hz, np.float64) / 700.0)


def htk_hz(mel):
    return 700.0 * (10.0 ** (np.asarray(mel, np.float64) / 2595.0) - 1.0)


def mel_filters(bins: int = BINS, fft: int = FFT, rate: int = RATE, low: float = 0.0,
                high: float = 8000.0) -> np.ndarray:
    """(fft / 2 + 1, bins) triangular filters, evenly spaced on the HTK mel scale."""
    edges = htk_hz(np.linspace(htk_mel(low), htk_mel(high), bins + 2))          # (bins + 2,)
    freqs = np.linspace(0, rate // 2, fft // 2 + 1)                              # (F,)
    slopes = edges[None, :] - freqs[:, None]                                     # (F, bins+2)
    widths = np.diff(edges)
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    return np.maximum(0.0, np.minimum(down, up))


FILTERS = mel_filters()
WINDOW = hann(FRAME).astype(np.float32)


def log_mel(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 (frames, 128) log-mel features, invalid frames zeroed, and the bool (frames,)
    mask of the frames that are real audio. At most 30 s are read."""
    samples = np.asarray(samples, np.float32)[:MAX_SAMPLES]
    mask = real_frames(len(samples))
    if not len(mask):
        return np.zeros((0, BINS), np.float32), mask
    wave = np.zeros(HOP + _padded(len(samples)), np.float32)
    wave[HOP:HOP + len(samples)] = samples
    starts = np.arange(len(mask)) * HOP
    frames = wave[starts[:, None] + np.arange(FRAME)[None, :]] * WINDOW           # (n, 320)
    magnitude = np.abs(np.fft.rfft(frames, n=FFT, axis=-1))                        # (n, 257)
    features = np.log(magnitude @ FILTERS + FLOOR).astype(np.float32)              # (n, 128)
    return features * mask[:, None], mask


def real_frames(samples: int) -> np.ndarray:
    """bool (frames,): for that many samples (at most 30 s read), the frames whose last
    sample is audio rather than padding."""
    samples = min(samples, MAX_SAMPLES)
    count = (HOP + _padded(samples) - (FRAME + 1)) // HOP + 1
    return np.arange(max(count, 0)) * HOP + FRAME < HOP + samples


def _padded(samples: int) -> int:
    return -(-samples // PAD_MULTIPLE) * PAD_MULTIPLE


def subsampled(mask: np.ndarray) -> np.ndarray:
    """The mask after one stride-2, kernel-3, padding-1 convolution over time."""
    return mask[::2][:(len(mask) - 1) // 2 + 1]


def tokens(samples: int) -> int:
    """Audio rows that many samples (at most 30 s) become: one per 40 ms."""
    return int(subsampled(subsampled(real_frames(samples))).sum())
