"""Images over the runner protocol: `python -m runner --model M --mmproj P`, the prompt's
[img-ID] tags and Images [{data, id}] as Ollama's server sends them."""

from __future__ import annotations

import base64
import re

import pytest

import runner

from tests.support.hf_vision import png
from tests.support.runner_process import RunnerProcess

IMAGE = png(4, 40, 56)


@pytest.fixture(scope="module")
def vision_runner(vision_models, tmp_path_factory):
    paths = vision_models("gemma3")
    process = RunnerProcess(paths["model"], tmp_path_factory.mktemp("vision-runner"),
                            "--mmproj", str(paths["mmproj"]), "--ctx-size", "256",
                            "--kv-cache-type", "f32", "--flash-attn", "off")
    process.wait_status(0)
    yield process
    process.stop()


def image(data: bytes, id: int = 0) -> dict:
    return {"data": base64.b64encode(data).decode(), "id": id}


def test_a_completion_with_an_image_is_the_in_process_one(vision_runner, vision_models):
    options = {"temperature": 0, "num_predict": 6}
    lines = vision_runner.complete("What is in [img-0]?", Images=[image(IMAGE)],
                                   Options=options)
    text = "".join(line.get("content", "") for line in lines)
    assert lines[-1]["done"] and lines[-1]["prompt_eval_count"] > 4
    paths = vision_models("gemma3")
    model = runner.load(paths["model"], projector=paths["mmproj"], num_ctx=256, threads=2,
                        kv_cache_type="f32")
    try:
        assert model.generate("What is in [img-0]?", images=[IMAGE], stream=False,
                              **options) == text
    finally:
        model.close()


@pytest.mark.parametrize("body,message", [
    ({"Prompt": "[img-0]", "Images": [{"data": "%%%", "id": 0}]}, "not base64"),
    ({"Prompt": "[img-3]", "Images": [image(IMAGE)]}, r"no image 3"),
    ({"Prompt": "[img-0]", "Images": [image(b"plain text")]}, "not an image"),
    ({"Prompt": "[img-0]", "Images": [image(IMAGE), image(IMAGE)]}, "Two images have the id 0"),
])
def test_bad_images_are_400_and_the_runner_serves_on(vision_runner, body, message):
    response = vision_runner.client.post("/completion", json=body)
    assert response.status_code == 400, response.text
    assert re.search(message, response.json()["error"])
    lines = vision_runner.complete("Hi [img-0]", Images=[image(IMAGE)],
                                   Options={"num_predict": 1})
    assert lines[-1]["done"]


@pytest.mark.parametrize("no_load", [False, True], ids=["loading at start", "loaded by /load"])
def test_a_corrupt_projector_is_an_error_status_with_its_sentence(vision_models, tmp_path,
                                                                  no_load):
    paths = vision_models("gemma3")
    corrupt = tmp_path / "mmproj.gguf"
    corrupt.write_bytes(paths["mmproj"].read_bytes()[:4096])         # its header cut short
    flags = ["--mmproj", str(corrupt), "--ctx-size", "256"] + (["--no-load"] if no_load else [])
    process = RunnerProcess(paths["model"], tmp_path, *flags)
    try:
        if no_load:
            refused = process.client.post("/load", json={"Operation": 2, "KvSize": 256})
            assert refused.status_code == 400 and "mmproj.gguf" in refused.json()["error"]
        process.wait_status(5)
        health = process.health()
        assert "failed to load" in health["error"] and "mmproj.gguf" in health["error"]
    finally:
        process.stop()
