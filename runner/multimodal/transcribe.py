"""Speech to text with a model that takes audio: the clip cut into 30 s chunks, each asked
for its transcription in turn (greedy), the text streamed as each chunk's comes."""

from __future__ import annotations

import io
from typing import Iterator

import numpy as np
import soundfile

from . import sound

TOKENS_PER_CHUNK = 448          # the most a chunk's transcription may take (Whisper's bound)


def prompt(language: str | None) -> str:
    where = f" in {language}" if language else ""
    return f"Transcribe the following speech segment{where}:"


def wav_chunks(data: bytes) -> list[bytes]:
    """The clip's 30 s chunks, each a float WAV at 16 kHz (AudioError for bytes that are not
    audio)."""
    out = []
    for chunk in sound.chunks(sound.decode(data)):
        buffer = io.BytesIO()
        soundfile.write(buffer, np.asarray(chunk, np.float32), sound.RATE, subtype="FLOAT",
                        format="WAV")
        out.append(buffer.getvalue())
    return out


def transcribe(model, data: bytes, language: str | None = None,
               num_predict: int = TOKENS_PER_CHUNK) -> Iterator[str]:
    """Text pieces of the clip's transcription; a newline between chunks."""
    if model.multimodal is None or "audio" not in model.multimodal.encoders:
        raise ValueError("This model takes no audio; load it with a projector that has an "
                         "audio encoder (Gemma 4's mmproj).")
    for i, chunk in enumerate(wav_chunks(data)):
        if i:
            yield "\n"
        messages = [{"role": "user", "content": prompt(language), "audio": [chunk]}]
        yield from model.chat(messages, temperature=0, num_predict=num_predict)
