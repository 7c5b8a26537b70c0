"""Audio through the server (`python -m runner serve`) with the official clients: a Gemma 4
created from its model file and an mmproj with both towers, show's audio capability, audio
in /api/chat's images (as Ollama sends it), OpenAI's input_audio parts and
/v1/audio/transcriptions, bad audio refused while the server serves on."""

from __future__ import annotations

import base64
import io

import pytest

from runner.multimodal.transcribe import TOKENS_PER_CHUNK, prompt, wav_chunks

from tests.support import hf_audio
from tests.support.server import ServerProcess

CLIP = hf_audio.wav(hf_audio.tone(1.1, 16000, seed=11), 16000, "FLOAT")
GREEDY = {"temperature": 0, "num_predict": 5}


@pytest.fixture(scope="module")
def audio_server(tmp_path_factory, audio_model):
    running = ServerProcess.exact(tmp_path_factory, "tiny-ears",
                                  {"model.gguf": audio_model["model"],
                                   "mmproj.gguf": audio_model["mmproj"]})
    yield running
    assert running.stop() == 0


def test_show_reports_audio_and_vision(audio_server):
    import ollama

    shown = ollama.Client(host=audio_server.url).show("tiny-ears")
    assert {"audio", "vision"} <= set(shown.capabilities)


def test_chat_with_audio_in_the_images_is_the_in_process_chat(audio_server, loaded):
    import ollama

    messages = [{"role": "user", "content": "What is this sound?", "images": [CLIP]}]
    reply = ollama.Client(host=audio_server.url).chat("tiny-ears", messages, options=GREEDY)
    local = [{"role": "user", "content": "What is this sound?", "audio": [CLIP]}]
    assert reply.message.content == loaded.chat(local, stream=False, **GREEDY)
    assert reply.prompt_eval_count > 27


def test_openai_input_audio_parts(audio_server, loaded):
    import openai

    client = openai.OpenAI(base_url=audio_server.url + "/v1", api_key="unused")
    reply = client.chat.completions.create(model="tiny-ears", temperature=0, max_tokens=5,
                                           messages=[{"role": "user", "content": [
                                               {"type": "text", "text": "Hear this."},
                                               {"type": "input_audio", "input_audio": {
                                                   "data": base64.b64encode(CLIP).decode(),
                                                   "format": "wav"}}]}])
    assert reply.choices[0].message.content is not None
    assert reply.usage.prompt_tokens > 27


def test_transcriptions_are_the_in_process_ones(audio_server, loaded):
    import openai

    client = openai.OpenAI(base_url=audio_server.url + "/v1", api_key="unused")
    result = client.audio.transcriptions.create(model="tiny-ears", language="English",
                                                file=("clip.wav", io.BytesIO(CLIP)))
    chunk, = wav_chunks(CLIP)
    expected = loaded.chat([{"role": "user", "content": prompt("English"), "audio": [chunk]}],
                           stream=False, temperature=0, num_predict=TOKENS_PER_CHUNK)
    assert result.text == expected.strip()
    text = audio_server.client.post("/v1/audio/transcriptions",
                                    data={"model": "tiny-ears", "response_format": "text",
                                          "language": "English"},
                                    files={"file": ("clip.wav", CLIP)})
    assert text.status_code == 200 and text.text == result.text


@pytest.mark.parametrize("data,files,message", [
    ({"model": "tiny-ears"}, {"file": ("a.wav", b"not a sound")}, "not audio"),
    ({"model": "tiny-ears"}, {"note": ("n.txt", b"hi")}, "file is required"),
    ({"model": "tiny-ears"}, None, "multipart/form-data"),
    ({}, {"file": ("a.wav", CLIP)}, "model is required"),
    ({"model": "tiny-ears", "response_format": "srt"}, {"file": ("a.wav", CLIP)},
     "response_format"),
    ({"model": "tiny-ears", "temperature": "hot"}, {"file": ("a.wav", CLIP)}, "temperature"),
    ({"model": "tiny-ears"}, {"file": ("a.wav", hf_audio.lying_rate(1))}, "sample rate is 1 Hz"),
])
def test_bad_transcription_requests_are_400(audio_server, data, files, message):
    response = audio_server.client.post("/v1/audio/transcriptions", data=data, files=files)
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]["message"]
    assert audio_server.client.get("/api/tags").status_code == 200


def test_a_model_without_ears_cannot_transcribe(audio_server, audio_model):
    audio_server.create("tiny-deaf", {"model.gguf": audio_model["model"]})
    response = audio_server.client.post("/v1/audio/transcriptions", data={"model": "tiny-deaf"},
                                        files={"file": ("a.wav", CLIP)})
    assert response.status_code == 400
    assert "does not support audio" in response.json()["error"]["message"]
