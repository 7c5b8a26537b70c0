"""A tiny random Gemma 4 with an audio tower (and a vision tower, as the released E2B/E4B
have both), made at test time with transformers, and the reference's outputs for it.

The audio config is the reference's tiny one that works (subsampling channels [128, 4]:
the projection after subsampling is sized from the first); clamps and norm weights get random
values so a model that ignored them would not match.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import numpy as np

from tests.support import hf_tiny
from tests.support import hf_vision

AUDIO_TOKENS = ["<|audio>", "<audio|>", "<|audio|>"]
# Gemma 4's turns, as its released template writes a user turn and the model's cue
TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|turn>{{ m['role'] }}\n{{ m['content'] }}"
            "<turn|>\n{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}")
GEMMA4_AUDIO = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    subsampling_conv_channels=[128, 4], output_proj_dims=48,
                    use_clipped_linears=True)


def tokenizer():
    kind = "gemma4_audio"
    hf_tiny.SPECIAL.setdefault(kind, hf_tiny.SPECIAL["gemma4"] + hf_vision.IMAGE_TOKENS["gemma4"]
                               + AUDIO_TOKENS)
    hf_tiny.PATTERN.setdefault(kind, hf_tiny.PATTERN["gemma4"])
    return hf_tiny.tokenizer(kind)


def gemma4(directory: Path, seed: int = 0) -> Path:
    """The tiny Gemma 4 of hf_vision with an audio tower beside its vision tower, clamps
    near +-2.5 and Gemma 4's turns as its template."""
    from transformers import Gemma4AudioConfig

    return hf_vision.gemma4(directory, seed, tok=tokenizer(),
                            audio_config=Gemma4AudioConfig(**GEMMA4_AUDIO).to_dict(),
                            bidirectional=None, bound=2.5, template=TEMPLATE)


def features(samples: np.ndarray) -> dict:
    """The reference extractor's input_features and input_features_mask (one clip)."""
    from transformers import Gemma4AudioFeatureExtractor

    return dict(Gemma4AudioFeatureExtractor()([samples], return_tensors="np"))


def encoded(model, samples: np.ndarray) -> np.ndarray:
    """The embedder's rows (the text model's inputs) for one clip."""
    import torch

    out = features(samples)
    with torch.no_grad():
        result = model.model.get_audio_features(torch.tensor(out["input_features"]),
                                                torch.tensor(out["input_features_mask"]))
    rows = result.pooler_output[0]
    return rows[result.attention_mask[0]].numpy()


def logits(model, ids: list[int], clips: list[np.ndarray]) -> np.ndarray:
    """Logits (T, vocab) of ids whose audio tokens hold clips' rows, in order."""
    import torch

    inputs = [features(clip) for clip in clips]
    frames = max(f["input_features"].shape[1] for f in inputs)
    values = np.zeros((len(clips), frames, 128), np.float32)
    masks = np.zeros((len(clips), frames), bool)
    for i, f in enumerate(inputs):
        n = f["input_features"].shape[1]
        values[i, :n], masks[i, :n] = f["input_features"][0], f["input_features_mask"][0]
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), input_features=torch.tensor(values),
                     input_features_mask=torch.tensor(masks)).logits[0].numpy()


def tone(seconds: float, rate: int, hz: float = 440.0, seed: int = 0) -> np.ndarray:
    """A tone with a little noise, float32 in [-1, 1]."""
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).standard_normal(t.shape)
    return (0.5 * np.sin(2 * np.pi * hz * t) + 0.05 * noise).astype(np.float32)


def lying_rate(rate: int) -> bytes:
    """A 16 kHz WAV of 8 KB whose header claims another sample rate."""
    import struct

    data = bytearray(wav(np.zeros(4000, np.float32), 16000, "PCM_16"))
    struct.pack_into("<II", data, 24, rate, rate * 2)          # rate, bytes per second
    return bytes(data)


def wav(samples: np.ndarray, rate: int, subtype: str = "PCM_16", channels: int = 1) -> bytes:
    import soundfile

    data = np.repeat(samples[:, None], channels, axis=1) if channels > 1 else samples
    out = io.BytesIO()
    soundfile.write(out, data, rate, subtype=subtype, format="WAV")
    return out.getvalue()


def speech(text: str, directory: Path) -> bytes | None:
    """Real speech from espeak-ng (a WAV at its own rate), or None where it is missing."""
    if shutil.which("espeak-ng") is None:
        return None
    path = directory / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(path), text], check=True, capture_output=True)
    return path.read_bytes()
