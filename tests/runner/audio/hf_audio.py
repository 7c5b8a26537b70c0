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

from ..convert import hf_tiny
from ..vision import hf_vision

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


def gemma4(directory: Path, seed: int = 0, vision: bool = True) -> Path:
    import torch
    from transformers import (Gemma4AudioConfig, Gemma4Config, Gemma4ForConditionalGeneration,
                              Gemma4ImageProcessorPil, Gemma4TextConfig, Gemma4VisionConfig)

    tok = tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t)
           for t in hf_vision.IMAGE_TOKENS["gemma4"] + AUDIO_TOKENS}
    text = Gemma4TextConfig(**{**hf_tiny.SHAPE, **hf_tiny.GEMMA4_KINDS["gemma4"]},
                            vocab_size=len(tok), vocab_size_per_layer_input=len(tok),
                            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                            pad_token_id=0)
    config = Gemma4Config(
        text_config=text.to_dict(),
        vision_config=Gemma4VisionConfig(**hf_vision.GEMMA4_VISION).to_dict() if vision
        else None,
        audio_config=Gemma4AudioConfig(**GEMMA4_AUDIO).to_dict(),
        boi_token_id=ids["<|image>"], eoi_token_id=ids["<image|>"],
        image_token_id=ids["<|image|>"], boa_token_id=ids["<|audio>"],
        eoa_token_index=ids["<audio|>"], audio_token_id=ids["<|audio|>"])
    torch.manual_seed(seed)
    model = Gemma4ForConditionalGeneration(config).eval()
    hf_tiny._vary_unit_weights(model)
    hf_vision._randomize(model)
    with torch.no_grad():
        for name, value in model.named_parameters():
            if name.endswith("per_dim_scale"):
                value.copy_(0.5 * torch.randn_like(value))
    hf_vision.set_gemma4_buffers(model, 2.5)
    model.save_pretrained(directory)
    tok.chat_template = TEMPLATE
    tok.save_pretrained(directory)
    Gemma4ImageProcessorPil(**hf_vision.GEMMA4_PROCESSOR).save_pretrained(directory)
    return directory


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
