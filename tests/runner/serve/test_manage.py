"""Model management through the official ollama client and raw HTTP."""

from __future__ import annotations

import hashlib
import importlib.metadata

import ollama
import pytest


def test_root_version_and_wrong_methods(server):
    assert server.client.get("/").text == "Ollama is running"
    assert server.client.head("/").status_code == 200
    version = server.client.get("/api/version").json()
    # the Ollama API version, which clients compare (Codex --oss wants 0.13.4 or later)
    assert tuple(map(int, version["version"].split("."))) >= (0, 13, 4)
    assert version["runner_version"] == importlib.metadata.version("pyggml-runner")
    wrong = server.client.get("/api/generate")
    assert wrong.status_code == 405 and wrong.json()["error"]


def test_tags_and_show_describe_each_model(ollama_client):
    models = {m.model: m for m in ollama_client.list().models}
    smol = models["smollm2:135m"]
    assert smol.size == 98362432 and len(smol.digest) == 64 and smol.modified_at
    assert smol.details.family == "llama" and smol.details.quantization_level == "Q4_1"
    assert smol.details.parameter_size == "135M" and smol.details.format == "gguf"
    shown = ollama_client.show("smollm2:135m")
    assert shown.modelinfo["general.architecture"] == "llama" and shown.template
    assert shown.capabilities == ["completion"] and shown.modified_at
    assert shown.modelinfo["tokenizer.ggml.tokens"] == []                 # big arrays left out
    assert ollama_client.show("tiny-bert").capabilities == ["embedding"]
    assert set(ollama_client.show("tiny-qwen").capabilities) == {"completion", "tools",
                                                                 "thinking"}
    with pytest.raises(ollama.ResponseError) as missing:
        ollama_client.show("nosuch")
    assert missing.value.status_code == 404 and "try pulling it first" in missing.value.error


def test_ps_shows_what_is_loaded(ollama_client):
    ollama_client.generate("smollm2:135m", "Hi", options={"num_predict": 1}, keep_alive="10m")
    (model,) = [m for m in ollama_client.ps().models if m.model == "smollm2:135m"]
    assert model.size > 98_000_000 and model.size_vram == 0 and model.digest
    assert model.expires_at and model.context_length == 4096
    assert model.details.family == "llama"


def test_pull_of_a_present_model_streams_to_success(ollama_client):
    statuses = [p.status for p in ollama_client.pull("smollm2:135m", stream=True)]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    assert "verifying sha256 digest" in statuses
    from ...rpc_servers import free_port

    # other names go to their registry (tests/runner/registry/); here, one nothing answers
    with pytest.raises(ollama.ResponseError, match="Could not reach the registry") as unknown:
        ollama_client.pull(f"http://127.0.0.1:{free_port()}/library/nosuch:1b", insecure=True)
    assert unknown.value.status_code == 502


def test_create_from_an_uploaded_blob_then_copy_and_delete(server, ollama_client, tiny_models):
    data = tiny_models["qwen"].read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert server.client.head(f"/api/blobs/{digest}").status_code in (200, 404)
    wrong = server.client.post("/api/blobs/sha256:" + "0" * 64, content=data)
    assert wrong.status_code == 400 and "digest mismatch" in wrong.json()["error"]
    assert server.client.post(f"/api/blobs/{digest}", content=data).status_code == 201
    assert server.client.head(f"/api/blobs/{digest}").status_code == 200
    statuses = [p.status for p in ollama_client.create(
        "uploaded", files={"model.gguf": digest}, system="Be brief.", stream=True)]
    assert statuses[-1] == "success"
    assert server.client.post("/api/show", json={"model": "uploaded"}).json()["system"] == \
        "Be brief."
    ollama_client.copy("uploaded", "copied:v2")
    names = {m.model for m in ollama_client.list().models}
    assert {"uploaded:latest", "copied:v2"} <= names
    reply = ollama_client.generate("copied:v2", "Hello", options={"num_predict": 2})
    assert reply.done
    ollama_client.delete("copied:v2")
    ollama_client.delete("uploaded")
    assert not {"uploaded:latest", "copied:v2"} & {m.model for m in ollama_client.list().models}
    with pytest.raises(ollama.ResponseError) as gone:
        ollama_client.delete("uploaded")
    assert gone.value.status_code == 404
    with pytest.raises(ollama.ResponseError):
        ollama_client.create("bad", files={"model.gguf": "sha256:" + "1" * 64})


def test_the_server_never_loads_ggml(server, ollama_client):
    """It reads GGUF headers and drives worker processes; the computing is theirs. Loading
    ggml would cost it start time and memory (bench/serve_start.py) and a GPU context."""
    ollama_client.list()
    ollama_client.show("smollm2:135m")
    ollama_client.generate("smollm2:135m", "Hi", options={"num_predict": 1})
    with open(f"/proc/{server.proc.pid}/maps") as maps:
        assert "libggml" not in maps.read()
    assert server.runner_pids()               # the generation ran in a worker, which has it


def test_delete_never_reaches_outside_the_store(server, tmp_path, models_dir):
    real = models_dir / "smollm2-135m-instruct-q4_1.gguf"
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "victim:x.gguf").symlink_to(real)          # makes the name a GGUF path
    target = victim / "x.gguf.json"
    target.write_text("{}")
    name = f"/../../../../..{tmp_path}/victim:x.gguf"
    refused = server.client.request("DELETE", "/api/delete", json={"model": name})
    assert refused.status_code == 400 and "nothing was deleted" in refused.json()["error"]
    assert target.exists() and (tmp_path / "victim:x.gguf").exists()
    model = tmp_path / "model.gguf"
    model.symlink_to(real)
    by_path = server.client.request("DELETE", "/api/delete", json={"model": str(model)})
    assert by_path.status_code == 400 and "nothing was deleted" in by_path.json()["error"]
    assert model.exists() and real.exists()


def test_deleting_a_namespaced_model_removes_its_empty_folders(server, models_dir):
    assert server.client.post("/api/copy", json={"source": "smollm2:135m",
                                                 "destination": "team/smol:v1"}).status_code == 200
    assert (models_dir / "manifests" / "team" / "smol" / "v1.json").is_file()
    assert server.client.request("DELETE", "/api/delete",
                                 json={"model": "team/smol:v1"}).status_code == 200
    assert not (models_dir / "manifests" / "team").exists()
    assert (models_dir / "manifests").is_dir()


def test_a_bad_file_is_refused_at_create_and_breaks_no_listing(server, tmp_path, models_dir):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"this is not a model")
    created = server.client.post("/api/create", json={"model": "fake", "from": str(fake),
                                                      "stream": False})
    assert created.status_code == 400 and "fake.gguf" in created.json()["error"]
    bad_parameters = server.client.post("/api/create", json={
        "model": "badparams", "from": "smollm2:135m", "parameters": ["temperature", 1]})
    assert bad_parameters.status_code == 400
    # a manifest naming a file that later turns bad: listed without it, the rest intact
    manifest = models_dir / "manifests" / "spoiled" / "latest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(f'{{"model": "{fake}"}}')
    try:
        tags = server.client.get("/api/tags")
        assert tags.status_code == 200
        names = [m["name"] for m in tags.json()["models"]]
        assert "smollm2:135m" in names and "spoiled:latest" not in names
        shown = server.client.post("/api/show", json={"model": "spoiled"})
        assert shown.status_code == 400 and "cannot be read" in shown.json()["error"]
    finally:
        manifest.unlink()
        manifest.parent.rmdir()


def peak_memory(pid: int) -> int:
    status = open(f"/proc/{pid}/status").read()
    return int(status.split("VmHWM:")[1].split()[0]) * 1024


def test_uploads_stream_to_disk_and_json_bodies_are_capped(models_dir, workdir):
    from .conftest import ServerProcess

    server = ServerProcess(models_dir, workdir, RUNNER_MAX_BODY=100_000)
    try:
        size, piece = 256 << 20, bytes(range(256)) * 4096          # 1 MiB pieces
        digest = hashlib.sha256()
        for _ in range(size // len(piece)):
            digest.update(piece)
        before = peak_memory(server.proc.pid)
        uploaded = server.client.post(f"/api/blobs/sha256:{digest.hexdigest()}",
                                      content=(piece for _ in range(size // len(piece))))
        assert uploaded.status_code == 201
        assert peak_memory(server.proc.pid) - before < 64 << 20      # not held: 256 MiB sent
        blob = models_dir / "blobs" / f"sha256-{digest.hexdigest()}"
        assert blob.stat().st_size == size
        blob.unlink()
        wrong = server.client.post("/api/blobs/sha256:" + "0" * 64, content=b"data")
        assert wrong.status_code == 400 and "digest mismatch" in wrong.json()["error"]
        assert not [p for p in (models_dir / "blobs").iterdir() if p.name.startswith(".")]
        big = server.client.post("/api/chat", json={"model": "smollm2:135m", "messages": [
            {"role": "user", "content": "x" * 200_000}]})
        assert big.status_code == 413 and "RUNNER_MAX_BODY" in big.json()["error"]
        assert server.client.get("/api/version").status_code == 200
    finally:
        assert server.stop() == 0


def test_a_keep_alive_beyond_any_date_is_for_ever(server):
    answer = server.client.post("/api/generate", json={"model": "smollm2:135m",
                                                       "keep_alive": 1e12})
    assert answer.status_code == 200 and answer.json()["done_reason"] == "load"
    listed = server.client.get("/api/ps")
    assert listed.status_code == 200
    (model,) = [m for m in listed.json()["models"] if m["model"] == "smollm2:135m"]
    assert model["expires_at"] == "2318-01-01T00:00:00Z"
    server.client.post("/api/generate", json={"model": "smollm2:135m", "keep_alive": "5m"})


def test_a_model_made_from_another_inherits_its_template_system_and_parameters(
        server, ollama_client):
    template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    ollama_client.create("base-made", from_="tiny-qwen", template=template, system="Be brief.",
                         parameters={"temperature": 0.25, "num_predict": 3})
    try:
        ollama_client.create("child-made", from_="base-made", parameters={"top_k": 7})
        shown = server.client.post("/api/show", json={"model": "child-made"}).json()
        assert shown["template"] == template and shown["system"] == "Be brief."
        assert "temperature 0.25" in shown["parameters"] and "top_k 7" in shown["parameters"]
        assert "num_predict 3" in shown["parameters"]
        reply = ollama_client.chat("child-made", messages=[{"role": "user", "content": "Hi"}])
        assert reply.done and reply.eval_count == 3
    finally:
        for name in ("child-made", "base-made"):
            try:
                ollama_client.delete(name)
            except ollama.ResponseError:
                pass


@pytest.mark.parametrize("template,words", [
    ("{{ .Prompt }}", "Go template"),
    ("{{- range .Messages }}{{ .Content }}{{ end }}", "Go template"),
    ("{% for m in messages %}", "not a valid Jinja"),
])
def test_a_template_that_cannot_render_is_refused_at_create(server, template, words):
    created = server.client.post("/api/create", json={
        "model": "never-made", "from": "tiny-qwen", "template": template, "stream": False})
    assert created.status_code == 400 and words in created.json()["error"]
    names = [m["name"] for m in server.client.get("/api/tags").json()["models"]]
    assert not any(name.startswith("never-made") for name in names)


def test_create_converts_a_checkpoint_quantizes_and_keeps_messages_and_license(
        server, ollama_client, tmp_path):
    """/api/create from a Hugging Face checkpoint's files (uploaded as blobs, converted
    here, in a process of its own), with messages a chat starts with and a license; then
    from that model, quantized (and a quantized one is not quantized again)."""
    from ..convert.hf_tiny import checkpoint

    hf = checkpoint("qwen3", tmp_path / "hf")
    files = {}
    for path in sorted(hf.iterdir()):
        data = path.read_bytes()
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        assert server.client.post(f"/api/blobs/{digest}", content=data).status_code == 201
        files[path.name] = digest
    statuses = [p.status for p in ollama_client.create(
        "converted", files=files, license="MIT, for tests",
        template="{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}",
        messages=[{"role": "user", "content": "Remember: blue."},
                  {"role": "assistant", "content": "Blue."}], stream=True)]
    try:
        assert statuses[0] == "converting model" and statuses[-1] == "success"
        shown = server.client.post("/api/show", json={"model": "converted"}).json()
        assert shown["license"] == "MIT, for tests"
        assert shown["messages"][0]["content"] == "Remember: blue."
        statuses = [p.status for p in ollama_client.create(
            "quantized", from_="converted", quantize="q8_0", stream=True)]
        assert "quantizing F16 model to Q8_0" in statuses and statuses[-1] == "success"
        again = server.client.post("/api/show", json={"model": "quantized",
                                                      "verbose": True}).json()
        assert again["license"] == "MIT, for tests" and again["messages"]
        types = {t["type"] for t in again["tensors"] if len(t["shape"]) > 1}
        assert "Q8_0" in types and "F16" not in types
        chat = {"messages": [{"role": "user", "content": "Which?"}], "stream": False,
                "options": {"num_predict": 1}}
        reply = server.client.post("/api/chat", json={"model": "quantized", **chat}).json()
        bare = server.client.post("/api/create", json={
            "model": "bare", "from": "quantized", "messages": [], "stream": False})
        assert bare.status_code == 200
        plain = server.client.post("/api/chat", json={"model": "bare", **chat}).json()
        assert reply["prompt_eval_count"] > plain["prompt_eval_count"]   # its messages too
        for quantize, words in (("q4_0", "already q8_0"), ("q9_9", "q9_9")):
            bad = server.client.post("/api/create", json={
                "model": "nope", "from": "quantized", "quantize": quantize, "stream": False})
            assert bad.status_code == 400 and words in bad.json()["error"].lower()
        unsafe = server.client.post("/api/create", json={
            "model": "nope", "files": {"../x.safetensors": files[next(iter(files))]},
            "stream": False})
        assert unsafe.status_code == 400
    finally:
        for name in ("converted", "quantized", "bare"):
            try:
                ollama_client.delete(name)
            except ollama.ResponseError:
                pass
