"""Prompts with audio, through the engine and the model, against transformers' logits: the
rows between <|audio> and <audio|>, causal in the text model; two clips; audio beside an
image; a clip longer than 30 s; the runner protocol carrying WAV bytes with the images; the
refusals."""

from __future__ import annotations

import base64
import itertools

import numpy as np
import pytest

import runner
from runner.engine.batch import Batch
from runner.multimodal.media import MediaRow, attach_media, token_ids

from tests.support import hf_audio
from tests.support.hf_vision import png
from tests.support.prompt_items import every_logit
from tests.support.runner_process import RunnerProcess

CLIP_A = hf_audio.tone(1.0, 16000, hz=300.0, seed=1)
CLIP_B = hf_audio.tone(2.1, 16000, hz=700.0, seed=2)
WAV_A, WAV_B = hf_audio.wav(CLIP_A, 16000, "FLOAT"), hf_audio.wav(CLIP_B, 16000, "FLOAT")


def reference_ids(hf, items) -> list[int]:
    return [hf.config.audio_token_id if isinstance(t, MediaRow) else t for t in items]


@pytest.mark.parametrize("prompt,clips", [
    ("Listen: [img-0] what is it?", [CLIP_A]),
    ("First [img-0] then [img-1], which is higher?", [CLIP_A, CLIP_B]),
], ids=["one", "two"])
def test_logits_with_audio_are_the_references(loaded, audio_reference, prompt, clips):
    items = loaded.prompt_items(prompt, [hf_audio.wav(c, 16000, "FLOAT") for c in clips])
    rows = [i for i, t in enumerate(items) if isinstance(t, MediaRow)]
    assert len(rows) == sum(25 if len(c) == 16000 else 53 for c in clips)
    ours = every_logit(loaded, items)
    expected = hf_audio.logits(audio_reference, reference_ids(audio_reference, items), clips)
    assert np.abs(ours - expected).max() <= 1e-3
    assert (ours.argmax(-1) == expected.argmax(-1)).all()


def test_audio_rows_stay_causal_and_sit_between_their_tokens(loaded):
    items = loaded.prompt_items("[img-0]", [WAV_A])
    rows = [i for i, t in enumerate(items) if isinstance(t, MediaRow)]
    vocab = loaded.tokenizer.vocab.tokens
    assert vocab[items[rows[0] - 1]] == "<|audio>" and vocab[items[rows[-1] + 1]] == "<audio|>"
    batch = Batch(token_ids(items), np.arange(len(items)), np.zeros(len(items)))
    attach_media(batch, items, itertools.count())
    assert (batch.blocks == -1).all()                 # no block: they do not look ahead


def test_audio_beside_an_image(loaded):
    image = png(3, 20, 12)
    items = loaded.prompt_items("See [img-0] and hear [img-1]", [image, WAV_A])
    kinds = {t.media.modality for t in items if isinstance(t, MediaRow)}
    assert kinds == {"image", "audio"}
    text = loaded.generate("See [img-0] and hear [img-1]", images=[image], audio=[WAV_A],
                           stream=False, temperature=0, num_predict=3)
    assert isinstance(text, str) and loaded.last.eval_count == 3


def test_a_clip_over_30_seconds_is_two_groups(loaded):
    long = hf_audio.wav(hf_audio.tone(31.0, 16000, seed=31), 16000)
    pieces = loaded.multimodal.media(long)
    assert [p.rows for p in pieces] == [750, 25]
    items = loaded.prompt_items("[img-0]", [long])
    opens = [t for t in items if not isinstance(t, MediaRow) and
             loaded.tokenizer.vocab.tokens[t] == "<|audio>"]
    assert len(opens) == 2


def test_chat_messages_carry_audio(loaded):
    text = loaded.chat([{"role": "user", "content": "What is this?", "audio": [WAV_B]}],
                       stream=False, temperature=0, num_predict=2)
    assert isinstance(text, str) and loaded.last.eval_count == 2


def test_a_second_turn_reuses_the_clip(loaded):
    encoder = loaded.multimodal.encoders["audio"]
    clip = hf_audio.wav(hf_audio.tone(1.5, 16000, seed=15), 16000)
    first = loaded.generate("[img-0] Hi", audio=[clip], stream=False, temperature=0,
                            num_predict=2)
    encoded = encoder.encoded
    again = loaded.generate("[img-0] Hi", audio=[clip], stream=False, temperature=0,
                            num_predict=2)
    assert again == first and encoder.encoded == encoded


@pytest.mark.parametrize("data,message", [
    (b"RIFF\x24\x00\x00\x00WAVEfmt ", "not audio"),
    (hf_audio.wav(np.zeros(50, np.float32), 16000), "too short"),
])
def test_bad_audio_is_a_clear_error(loaded, data, message):
    with pytest.raises(ValueError, match=message):
        loaded.generate("[img-0]", audio=[data], stream=False)


def test_a_vision_only_projector_refuses_audio(vision_models):
    paths = vision_models("gemma4")
    model = runner.load(paths["model"], projector=paths["mmproj"], num_ctx=128, threads=2)
    try:
        with pytest.raises(ValueError, match="takes images, not audio"):
            model.generate("[img-0]", audio=[WAV_A], stream=False)
    finally:
        model.close()


def test_the_runner_protocol_carries_wav_with_the_images(audio_model, loaded, tmp_path):
    process = RunnerProcess(audio_model["model"], tmp_path, "--mmproj",
                            str(audio_model["mmproj"]), "--ctx-size", "2048",
                            "--kv-cache-type", "f32", "--flash-attn", "off")
    try:
        process.wait_status(0)
        options = {"temperature": 0, "num_predict": 4}
        lines = process.complete("Hear [img-7]", Options=options,
                                 Images=[{"data": base64.b64encode(WAV_A).decode(), "id": 7}])
        text = "".join(line.get("content", "") for line in lines)
        assert lines[-1]["done"] and lines[-1]["prompt_eval_count"] > 25
        assert text == loaded.generate("Hear [img-7]", images={7: WAV_A}, stream=False,
                                       **options)
        bad = process.client.post("/completion", json={
            "Prompt": "[img-0]", "Images": [{"data": base64.b64encode(b"RIFF\x00\x00\x00\x00"
                                                                       b"WAVEjunk").decode(),
                                             "id": 0}]})
        assert bad.status_code == 400 and "not audio" in bad.json()["error"]
    finally:
        process.stop()
