"""Gemma 4's audio encoder (the conformer and the embedder) from our converted mmproj,
against transformers' get_audio_features: clips of one block, several blocks, with padding
frames at the end, speech, and the longest clip; encoded once per clip."""

from __future__ import annotations

import numpy as np
import pytest

from runner.models.audio import gemma4a
from runner.models.vision import projector_class
from runner.multimodal import sound

from tests.support import hf_audio
from tests.support.architectures import AUDIO_PROJECTOR


def relative_error(ours, expected) -> float:
    return float(np.abs(ours - expected).max() / max(1.0, np.abs(expected).max()))


@pytest.mark.parametrize("seconds", [0.37, 1.0, 3.3, 7.77])
def test_rows_are_the_references(loaded, audio_reference, seconds):
    clip = hf_audio.tone(seconds, 16000, seed=int(seconds * 100))
    expected = hf_audio.encoded(audio_reference, clip)
    assert type(loaded.multimodal.encoders["audio"].projector) is projector_class(AUDIO_PROJECTOR)
    media, = loaded.multimodal.media(hf_audio.wav(clip, 16000, "FLOAT"))
    ours = media.embedding()
    assert ours.shape == expected.shape == (media.rows, loaded.loaded.model.config.embd)
    assert relative_error(ours, expected) <= 1e-4


def test_speech_rows_are_the_references(loaded, audio_reference, tmp_path):
    data = hf_audio.speech("Hello there, how are you today?", tmp_path)
    if data is None:
        pytest.skip("espeak-ng is not installed (.ci/run installs it)")
    expected = hf_audio.encoded(audio_reference, sound.decode(data))
    media, = loaded.multimodal.media(data)
    assert relative_error(media.embedding(), expected) <= 1e-4


@pytest.mark.slow
def test_thirty_seconds_are_the_references(loaded, audio_reference):
    clip = hf_audio.tone(30.0, 16000, seed=30)
    expected = hf_audio.encoded(audio_reference, clip)
    media, = loaded.multimodal.media(hf_audio.wav(clip, 16000, "FLOAT"))
    assert media.rows == 750
    assert relative_error(media.embedding(), expected) <= 1e-4


def test_a_clip_is_encoded_once(loaded):
    encoder = loaded.multimodal.encoders["audio"]
    data = hf_audio.wav(hf_audio.tone(0.8, 16000, seed=8), 16000)
    before = encoder.encoded
    first, = loaded.multimodal.media(data)
    first.embedding()
    again, = loaded.multimodal.media(data)
    assert again.ready
    assert np.array_equal(again.embedding(), first.embedding())
    assert encoder.encoded == before + 1


def test_the_blocked_mask_sees_the_eleven_keys_before_and_itself():
    mask = gemma4a.block_mask(30)                    # (3 blocks, 1, 12, 24)
    seen = mask == 0
    # query 20 (block 1, row 8) sees keys 9..20: columns 9 - 0 .. 20 - 0 of keys from 0
    keys = np.nonzero(seen[1, 0, 8])[0] + 1 * 12 - 12
    assert list(keys) == list(range(9, 21))
    assert not seen[0, 0, :, :12].any()                  # nothing before the audio
    assert not seen[2, 0, :, 18:].any()                  # nor past it (keys 30 and on)
    assert seen.sum(-1).max() == 12


def test_both_encoders_are_measured_as_they_are_allocated(audio_model):
    import runner

    from tests.support.footprint import measured

    expected = measured(audio_model, True)
    model = runner.load(audio_model["model"], projector=audio_model["mmproj"], num_ctx=256,
                        threads=2)
    try:
        assert set(model.multimodal.encoders) == {"image", "audio"}
        assert model.footprint() == expected
    finally:
        model.close()
