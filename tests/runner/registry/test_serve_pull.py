"""/api/pull through the server with Ollama's official client, from the loopback registry:
streamed progress, the pulled model listed, shown (its parameters and system prompt),
answering, copied and removed; errors as Ollama reports them; `python -m runner pull` in a
process of its own; and hf.co names through a Hugging Face-shaped server (HF_ENDPOINT)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from runner.registry.huggingface import choose
from runner.registry.transfer import PullError

from tests.support.registry_server import (GO_TEMPLATE, PARAMS, SYSTEM, RegistryServer, Served,
                                           with_config)
from tests.support.server import ServerProcess

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "location": {"type": "string"}}}}}]


# a template that doubles a string until it would fill the memory
HOSTILE = '{{ $x := "ab" }}{{ range 64 }}{{ $x = printf "%s%s" $x $x }}{{ end }}{{ $x }}'


@pytest.fixture(scope="module")
def servers(model_paths, tmp_path_factory):
    """A registry holding library/tiny:1b (smollm2 with a Go template, system and params) and
    a Hugging Face repository of two quantizations and a projector, and our server."""
    files = tmp_path_factory.mktemp("layers")
    texts = {"template": GO_TEMPLATE, "system": SYSTEM, "params": json.dumps(PARAMS)}
    for kind, text in texts.items():
        (files / kind).write_text(text)
    served = Served()
    served.add_model("library/tiny:1b", [("model", model_paths["smollm2"])] +
                     [(kind, files / kind) for kind in texts])
    served.add_model("library/gemma3:270m", [("model", model_paths["gemma3"])])
    (files / "hostile").write_text(HOSTILE)             # Gemma 3's GGUF has no template
    served.add_model("library/hostile:1b", [("model", model_paths["gemma3"]),
                                            ("template", files / "hostile")])
    served.add_model("library/coder:1b", [("model", model_paths["gemma3"])])
    with_config(served, "library/coder:1b", files / "config.json", {
        "model_format": "gguf", "renderer": "qwen3.5", "parser": "qwen3.5"})
    small = served.add_blob(model_paths["smollm2"])
    served.repos["someone/Tiny-GGUF"] = {"Tiny-Q4_K_M.gguf": small, "Tiny-Q8_0.gguf": small}
    served.repos["someone/Seeing-GGUF"] = {"Seeing-Q4_K_M.gguf": small,
                                           "mmproj-Seeing-F16.gguf": served.add_blob(
                                               projector_file(files / "mmproj.gguf"))}
    registry = RegistryServer(served)
    server = ServerProcess(tmp_path_factory.mktemp("store"), tmp_path_factory.mktemp("serve"),
                           HF_ENDPOINT=f"http://{registry.host}")
    yield registry, server
    server.stop()
    registry.close()


def projector_file(path):
    """A minimal vision projector GGUF (an mmproj's keys, one tensor)."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_bool(gguf.Keys.Clip.HAS_VISION_ENCODER, True)
    writer.add_string(gguf.Keys.Clip.PROJECTOR_TYPE, "gemma3")
    writer.add_tensor("v.patch_embd.weight", np.zeros((4, 4), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_the_official_client_pulls_and_the_model_answers(servers):
    import ollama

    registry, server = servers
    client = ollama.Client(host=server.url)
    name = f"http://{registry.host}/library/tiny:1b"
    events = list(client.pull(name, insecure=True, stream=True))
    assert events[0].status == "pulling manifest" and events[-1].status == "success"
    assert any(e.total and e.completed == e.total for e in events)
    stored = f"{registry.host}/library/tiny:1b"
    assert stored in [m.model for m in client.list().models]
    shown = server.client.post("/api/show", json={"model": stored}).json()
    assert shown["system"] == SYSTEM
    assert 'stop "<|im_end|>"' in shown["parameters"].splitlines()
    reply = client.generate(stored, "Hello", options={"num_predict": 4})
    assert reply.done and reply.response
    client.copy(stored, "mine:latest")
    client.delete(stored)
    assert [m.model for m in client.list().models if "tiny" in m.model] == []
    assert client.generate("mine", "Hi", options={"num_predict": 2}).done   # its blobs kept


@pytest.mark.parametrize("body,status,message", [
    ({"model": "library/absent:1b", "insecure": True}, 404, "has no model"),
    ({"model": "library/tiny:1b"}, 400, "plain HTTP"),
    ({"model": "bad name!"}, 400, "is not a model name"),
])
def test_pull_errors_are_statuses_with_a_sentence(servers, body, status, message):
    registry, server = servers
    if not body["model"].startswith("bad"):
        body = dict(body, model=f"http://{registry.host}/{body['model']}")
    reply = server.client.post("/api/pull", json=dict(body, stream=False))
    assert reply.status_code == status and message in reply.json()["error"]
    streamed = server.client.post("/api/pull", json=body)
    assert streamed.status_code == 200 and message in streamed.text.splitlines()[-1]


def test_a_renderer_named_by_the_config_gives_tools_and_thinking(servers):
    """Gemma 3's tiny GGUF has no template: its tools and thinking come from the config's
    parser, its prompts from the renderer (test_pull_renderer.py checks their text)."""
    registry, server = servers
    name = f"http://{registry.host}/library/coder:1b"
    pulled = server.client.post("/api/pull", json={"model": name, "insecure": True,
                                                   "stream": False})
    assert pulled.status_code == 200, pulled.text
    stored = f"{registry.host}/library/coder:1b"
    shown = server.client.post("/api/show", json={"model": stored}).json()
    assert {"tools", "thinking"} <= set(shown["capabilities"])
    assert (shown["renderer"], shown["parser"]) == ("qwen3.5", "qwen3.5")
    chat = server.client.post("/api/chat", json={
        "model": stored, "stream": False, "tools": TOOLS, "think": True,
        "messages": [{"role": "user", "content": "Weather?"}], "options": {"num_predict": 2}})
    assert chat.status_code == 200, chat.text
    assert chat.json()["done"]
    generated = server.client.post("/api/generate", json={    # its format from the parser
        "model": stored, "stream": False, "prompt": "Weather?", "think": True,
        "options": {"num_predict": 2}})
    assert generated.status_code == 200 and generated.json()["done"], generated.text


def test_a_hostile_template_is_a_400_and_the_server_serves_on(servers):
    registry, server = servers
    name = f"http://{registry.host}/library/hostile:1b"
    pulled = server.client.post("/api/pull", json={"model": name, "insecure": True,
                                                   "stream": False})
    assert pulled.status_code == 200, pulled.text
    chat = server.client.post("/api/chat", json={
        "model": f"{registry.host}/library/hostile:1b", "stream": False,
        "messages": [{"role": "user", "content": "Hi"}], "options": {"num_predict": 2}})
    assert chat.status_code == 400
    assert "Go template failed: printf made a value of more than" in chat.json()["error"]
    raw = server.client.post("/api/generate", json={
        "model": f"{registry.host}/library/hostile:1b", "prompt": "Hi", "raw": True,
        "stream": False, "options": {"num_predict": 2}})
    assert raw.status_code == 200 and raw.json()["done"]


def test_hugging_face_names_pick_the_quant_and_the_projector(servers):
    import ollama

    registry, server = servers
    client = ollama.Client(host=server.url)
    assert list(client.pull("hf.co/someone/Tiny-GGUF:Q8_0", stream=True))[-1].status == \
        "success"
    assert client.generate("hf.co/someone/Tiny-GGUF:Q8_0", "Hi",
                           options={"num_predict": 2}).done
    client.pull("hf.co/someone/Seeing-GGUF")                  # Q4_K_M, and its projector
    shown = server.client.post("/api/show", json={"model": "hf.co/someone/Seeing-GGUF"})
    assert "vision" in shown.json()["capabilities"]
    assert shown.json()["projector_info"]["clip.projector_type"] == "gemma3"
    with pytest.raises(ollama.ResponseError, match="no GGUF of the quantization Q2_K"):
        client.pull("hf.co/someone/Tiny-GGUF:Q2_K")
    with pytest.raises(ollama.ResponseError, match="no repository someone/Absent"):
        client.pull("hf.co/someone/Absent")


def test_the_quant_is_chosen_as_ollama_chooses():
    files = ["README.md", "m-Q8_0.gguf", "m-Q4_K_M.gguf", "mmproj-m-BF16.gguf",
             "mmproj-m-F16.gguf"]
    assert choose(files, "latest") == ("m-Q4_K_M.gguf", "mmproj-m-F16.gguf")
    assert choose(files, "q8_0") == ("m-Q8_0.gguf", "mmproj-m-F16.gguf")
    assert choose(["b-Q6_K.gguf", "a-Q5_K_M.gguf"], "latest") == ("a-Q5_K_M.gguf", None)
    with pytest.raises(PullError, match="no GGUF model file"):
        choose(["README.md", "mmproj.gguf"], "latest")


def test_the_cli_pulls_in_process_with_a_progress_line(servers, tmp_path, model_paths):
    """Gemma 3 270M: 253 MB, three parts of Ollama's 100 MB, fetched in parallel (run away
    from the checkout, whose source tree would shadow the installed package)."""
    registry, _ = servers
    digest = registry.served.manifests["library/gemma3:270m"]["layers"][0]["digest"]
    ranges_before = len(registry.served.ranges(digest))     # other pulls of its blob
    env = {**os.environ, "RUNNER_MODELS": str(tmp_path / "store"),
           "RUNNER_HOST": "127.0.0.1:1"}                          # no server: in process
    done = subprocess.run([sys.executable, "-m", "runner", "pull", "--insecure",
                           f"http://{registry.host}/library/gemma3:270m"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{registry.host}/library/gemma3:270m"
    assert "pulling manifest" in done.stderr and "success" in done.stderr
    assert len(registry.served.ranges(digest)) - ranges_before == 3
    blob = tmp_path / "store" / "blobs" / f"sha256-{digest[7:]}"
    assert blob.stat().st_size == model_paths["gemma3"].stat().st_size
    refused = subprocess.run([sys.executable, "-m", "runner", "pull",
                              f"http://{registry.host}/library/tiny:1b"], env=env,
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "--insecure" in refused.stderr
    assert "Traceback" not in refused.stderr
