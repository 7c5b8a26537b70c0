"""Images through the server (`python -m runner serve`) with the official clients: a model
created from a model file and its mmproj, /api/show's vision capability and projector,
/api/chat, /api/generate and OpenAI's image_url parts, bad images refused."""

from __future__ import annotations

import base64

import pytest

import runner

from tests.support.hf_vision import png
from tests.support.server import ServerProcess

IMAGE = png(12, 40, 56)
GREEDY = {"temperature": 0, "num_predict": 5}
# the families served, and their projector types (Qwen's rows placed in 2-D by M-RoPE)
PROJECTORS = {"gemma3": "gemma3", "mistral3": "pixtral", "qwen2_5_vl": "qwen2.5vl_merger",
              "qwen3_vl": "qwen3vl_merger", "qwen3_5": "qwen3vl_merger"}


@pytest.fixture(scope="module", params=list(PROJECTORS))
def family(request):
    return request.param


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory, vision_models, family):
    paths = vision_models(family)
    running = ServerProcess.exact(tmp_path_factory, "tiny-vision",
                                  {"model.gguf": paths["model"], "mmproj.gguf": paths["mmproj"]})
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def local(vision_models, family):
    paths = vision_models(family)
    model = runner.load(paths["model"], projector=paths["mmproj"], num_ctx=4096, threads=2,
                        kv_cache_type="f32")
    yield model
    model.close()


def test_show_reports_vision_and_the_projector(vision_server, family):
    import ollama

    shown = ollama.Client(host=vision_server.url).show("tiny-vision")
    assert "vision" in shown.capabilities
    raw = vision_server.client.post("/api/show", json={"model": "tiny-vision"}).json()
    assert raw["projector_info"]["clip.projector_type"] == PROJECTORS[family]
    assert "vision" in [m for m in vision_server.client.get("/api/tags").json()["models"]
                        if m["name"] == "tiny-vision:latest"][0]["capabilities"]


def test_chat_with_an_image_is_the_in_process_chat(vision_server, local):
    import ollama

    messages = [{"role": "user", "content": "What is this?", "images": [IMAGE]}]
    reply = ollama.Client(host=vision_server.url).chat("tiny-vision", messages,
                                                       options=GREEDY)
    assert reply.message.content == local.chat(messages, stream=False, **GREEDY)
    assert reply.prompt_eval_count > 4


def test_raw_generate_puts_the_image_where_its_tag_is(vision_server, local):
    import ollama

    reply = ollama.Client(host=vision_server.url).generate(
        "tiny-vision", "Look [img-0] now", images=[IMAGE], raw=True, options=GREEDY)
    assert reply.response == local.generate("Look [img-0] now", images=[IMAGE],
                                            stream=False, **GREEDY)


def test_openai_image_url_parts(vision_server):
    import openai

    client = openai.OpenAI(base_url=f"{vision_server.url}/v1", api_key="unused")
    url = "data:image/png;base64," + base64.b64encode(IMAGE).decode()
    reply = client.chat.completions.create(model="tiny-vision", max_tokens=3, messages=[
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                     {"type": "image_url", "image_url": {"url": url}}]}])
    assert reply.choices[0].message.content is not None
    assert reply.usage.prompt_tokens > 4


@pytest.mark.parametrize("images,message", [
    (["not base64 !!"], "not base64"),
    ([base64.b64encode(b"plain text").decode()], "not an image"),
    ("one string", "images\" has the wrong type"),
])
def test_bad_images_are_400_and_the_server_serves_on(vision_server, images, message):
    response = vision_server.client.post("/api/chat", json={
        "model": "tiny-vision", "stream": False,
        "messages": [{"role": "user", "content": "Hi", "images": images}]})
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]
    ok = vision_server.client.post("/api/generate", json={
        "model": "tiny-vision", "prompt": "Hi", "stream": False,
        "options": {"num_predict": 1}})
    assert ok.status_code == 200
