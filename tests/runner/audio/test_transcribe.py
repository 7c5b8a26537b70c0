"""`python -m runner transcribe MODEL FILE`: the text of each 30 s chunk, as the Python API
gives it, streamed; clear errors for files that are not audio and models that hear nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runner.multimodal import sound
from runner.multimodal.transcribe import transcribe, wav_chunks

from tests.support import hf_audio


def run_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "runner", "transcribe", *map(str, args),
                           "--threads", "2", "--no-pull"], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_the_command_prints_what_the_api_transcribes(audio_model, loaded, tmp_path):
    data = hf_audio.wav(hf_audio.tone(1.2, 22050, seed=12), 22050)
    path = tmp_path / "clip.wav"
    path.write_bytes(data)
    done = run_cli(audio_model["model"], path, "--mmproj", audio_model["mmproj"],
                   "--language", "English", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    expected = "".join(transcribe(loaded, data, "English"))
    assert done.stdout == expected + "\n"


def test_a_long_clip_is_asked_about_chunk_by_chunk():
    data = hf_audio.wav(hf_audio.tone(31.0, 44100, seed=3), 44100)
    chunks = wav_chunks(data)
    assert [len(sound.decode(c)) for c in chunks] == [480000, 16000]


def test_a_file_that_is_not_audio_is_a_clear_error(audio_model, tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("not a sound")
    done = run_cli(audio_model["model"], path, "--mmproj", audio_model["mmproj"], cwd=tmp_path)
    assert done.returncode != 0 and "not audio" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_model_without_ears_is_refused(audio_model):
    import runner

    text_only = runner.load(audio_model["model"], num_ctx=64, threads=2)
    try:
        with pytest.raises(ValueError, match="takes no audio"):
            list(transcribe(text_only, hf_audio.wav(hf_audio.tone(0.5, 16000), 16000)))
    finally:
        text_only.close()
