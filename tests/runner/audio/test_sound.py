"""Sound files to 16 kHz mono samples (soundfile, soxr) and the log-mel front end, against
Hugging Face's Gemma4AudioFeatureExtractor on real speech (espeak-ng) and on tones."""

from __future__ import annotations

import numpy as np
import pytest

from runner.models.audio import melspec
from runner.multimodal import sound

from tests.support import hf_audio


@pytest.mark.parametrize("rate", [8000, 16000, 44100, 48000])
def test_log_mel_matches_the_reference_at_each_rate(rate):
    samples = sound.decode(hf_audio.wav(hf_audio.tone(1.3, rate), rate, "FLOAT"))
    assert abs(len(samples) - round(1.3 * 16000)) <= 1
    ours, mask = melspec.log_mel(samples)
    reference = hf_audio.features(samples)
    assert np.abs(ours - reference["input_features"][0]).max() <= 1e-5
    assert np.array_equal(mask, reference["input_features_mask"][0])


def test_log_mel_matches_the_reference_on_speech(tmp_path):
    data = hf_audio.speech("The quick brown fox jumps over the lazy dog.", tmp_path)
    if data is None:
        pytest.skip("espeak-ng is not installed (.ci/run installs it)")
    samples = sound.decode(data)
    ours, _ = melspec.log_mel(samples)
    reference = hf_audio.features(samples)["input_features"][0]
    assert ours.shape == reference.shape and ours.shape[0] > 100
    assert np.abs(ours - reference).max() <= 1e-5


def test_one_second_makes_99_frames_and_25_rows():
    features, mask = melspec.log_mel(np.zeros(16000, np.float32))
    assert features.shape == (99, 128) and mask.all()
    assert melspec.tokens(16000) == 25
    assert melspec.tokens(30 * 16000) == melspec.tokens(31 * 16000) == 750


def test_resampling_keeps_the_pitch():
    samples = sound.decode(hf_audio.wav(hf_audio.tone(1.0, 44100, hz=1000.0), 44100))
    spectrum = np.abs(np.fft.rfft(samples))
    assert abs(np.argmax(spectrum) * 16000 / len(samples) - 1000.0) < 2.0


@pytest.mark.parametrize("subtype", ["PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT"])
def test_every_pcm_width_decodes_to_the_same_signal(subtype):
    clip = hf_audio.tone(0.5, 16000)
    samples = sound.decode(hf_audio.wav(clip, 16000, subtype))
    tolerance = {"PCM_U8": 1e-2, "PCM_16": 1e-4}.get(subtype, 1e-6)
    assert np.abs(samples - clip).max() <= tolerance


def test_channels_are_averaged():
    clip = hf_audio.tone(0.5, 16000)
    assert np.allclose(sound.decode(hf_audio.wav(clip, 16000, "FLOAT", channels=2)), clip,
                       atol=1e-6)


def test_long_clips_are_cut_into_30_second_chunks():
    pieces = sound.chunks(np.zeros(int(65.5 * 16000), np.float32))
    assert [len(p) for p in pieces] == [480000, 480000, 88000]


@pytest.mark.parametrize("data, message", [
    (b"", "empty"),
    (b"not a sound at all", "not audio"),
    (b"RIFF\x24\x00\x00\x00WAVEfmt ", "not audio"),            # truncated header
    ("text", "must be bytes"),
])
def test_bad_audio_is_refused_clearly(data, message):
    with pytest.raises(sound.AudioError, match=message):
        sound.decode(data)


@pytest.mark.parametrize("data, message", [
    (hf_audio.lying_rate(1), "sample rate is 1 Hz"),
    (hf_audio.lying_rate(10_000_000), "sample rate is 10000000 Hz"),
    (hf_audio.wav(np.zeros(100, np.float32), 800, "PCM_16"), "sample rate"),
    (hf_audio.wav(np.zeros(21 * 60 * 1000, np.float32), 1000, "PCM_16"), "lasts 1260 s"),
])
def test_clips_that_would_grow_without_bound_are_refused_from_their_header(data, message):
    with pytest.raises(sound.AudioError, match=message):
        sound.decode(data)


def test_a_header_without_samples_is_refused():
    empty = hf_audio.wav(np.zeros(0, np.float32), 16000)
    with pytest.raises(sound.AudioError, match="no samples"):
        sound.decode(empty)


def test_samples_that_are_not_numbers_are_refused():
    clip = hf_audio.tone(0.2, 16000)
    clip[100] = np.nan
    with pytest.raises(sound.AudioError, match="not finite"):
        sound.decode(hf_audio.wav(clip, 16000, "FLOAT"))


def test_sound_files_are_told_from_images_by_content():
    assert sound.is_audio(hf_audio.wav(hf_audio.tone(0.1, 16000), 16000))
    assert not sound.is_audio(b"\x89PNG\r\n\x1a\n" + bytes(20))
    assert not sound.is_audio(b"RIFF\x00\x00\x00\x00WEBPVP8 ")         # a WebP image
