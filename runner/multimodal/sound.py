"""Audio bytes to 16 kHz mono samples: libsndfile (through soundfile) decodes WAV (PCM 8, 16,
24 and 32 bit, float, WAVE_FORMAT_EXTENSIBLE), FLAC and Ogg; channels are averaged; soxr
resamples to the rate the encoder was trained at; a long clip is cut into 30 s chunks, each
its own run of audio rows (the reference extractor reads at most 30 s at a time).
"""

from __future__ import annotations

import io

import numpy as np
import soundfile
import soxr


RATE = 16_000                  # what the audio encoders were trained at
MAX_SAMPLES = 30 * RATE        # what the reference extractor reads at a time
MIN_RATE, MAX_RATE = 1_000, 384_000   # telephone audio is 8 kHz; studio at most 384 kHz
MAX_CHANNELS = 32
MAX_SECONDS = 20 * 60          # a clip read at once (its samples, resampled, held in memory)
MAGIC = (b"RIFF", b"RIFX", b"RF64", b"fLaC", b"OggS")


class AudioError(ValueError):
    """Bytes that are not audio this runner reads."""


def is_audio(data) -> bool:
    """Whether data looks like a sound file (Ollama sends audio with the images and tells
    them apart by content, as this does)."""
    head = bytes(data[:12])
    if head[:4] in (b"RIFF", b"RIFX", b"RF64"):
        return head[8:12] == b"WAVE"
    return head[:4] in MAGIC


def decode(data) -> np.ndarray:
    """float32 mono samples at RATE from an encoded sound file."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise AudioError(f"Audio must be bytes, not {type(data).__name__}.")
    if not data:
        raise AudioError("The audio is empty (no bytes).")
    try:
        _check_bounds(soundfile.info(io.BytesIO(bytes(data))))
        samples, rate = soundfile.read(io.BytesIO(bytes(data)), dtype="float32",
                                       always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as error:
        if isinstance(error, AudioError):
            raise
        raise AudioError(f"The data is not audio this runner reads (WAV, FLAC or Ogg): "
                         f"{error}") from None
    if samples.shape[0] == 0:
        raise AudioError("The audio has no samples.")
    if not np.isfinite(samples).all():
        raise AudioError("The audio has samples that are not finite numbers (NaN or "
                         "infinity).")
    mono = samples.mean(axis=1, dtype=np.float64).astype(np.float32)
    if rate != RATE:
        mono = soxr.resample(mono, rate, RATE, quality="HQ").astype(np.float32)
    return mono


def _check_bounds(info) -> None:
    """Refuse, from the header alone, a clip that would decode or resample to more memory
    than any real recording needs (a header can claim 1 Hz and grow 16000 times)."""
    if not MIN_RATE <= info.samplerate <= MAX_RATE:
        raise AudioError(f"The audio's sample rate is {info.samplerate} Hz; this runner reads "
                         f"{MIN_RATE} to {MAX_RATE} Hz.")
    if not 1 <= info.channels <= MAX_CHANNELS:
        raise AudioError(f"The audio has {info.channels} channels; at most {MAX_CHANNELS} "
                         "are read.")
    seconds = info.frames / info.samplerate
    if seconds > MAX_SECONDS:
        raise AudioError(f"The audio lasts {seconds:.0f} s; at most {MAX_SECONDS} s are read "
                         "at once.")


def chunks(samples: np.ndarray) -> list[np.ndarray]:
    """samples cut into pieces of at most 30 s (what the front end reads at a time)."""
    return [samples[start:start + MAX_SAMPLES]
            for start in range(0, len(samples), MAX_SAMPLES)]
