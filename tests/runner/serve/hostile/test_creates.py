"""/api/create, /api/copy and /api/delete as a hostile or unlucky client meets them: a
checkpoint whose config.json lies about its sizes (it made the converter allocate without
end), malformed files and requests, a client that leaves a conversion, a copy of a file
that is not GGUF. Each probe runs under the memory watchdog around the server (and its
conversion child), bounded in time, and ends in a 4xx with one sentence."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import socket
import time
from pathlib import Path

import psutil
import pytest

from runner.convert import convert

from tests.support.hf_tiny import checkpoint
from tests.support.hostile_checkpoint import rewritten, safetensors
from tests.support.server import ServerProcess, eventually
from tests.support.watchdog import MemoryWatchdog, tree_rss

pytestmark = pytest.mark.server

MiB = 1 << 20
GROWTH_MIB = 600                # what a probe may cost the server and its child, at most


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Qwen 3 checkpoint (2 layers, 600 tokens) and its GGUF."""
    work = tmp_path_factory.mktemp("tiny")
    hf = checkpoint("qwen3", work / "hf")
    return hf, convert(hf, work / "tiny.gguf", "f16", progress=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny):
    store = tmp_path_factory.mktemp("store")
    running = ServerProcess(store, tmp_path_factory.mktemp("serve"))
    running.store = store
    made = running.client.post("/api/create", json={
        "model": "tiny", "files": upload(running, {"model.gguf": tiny[1]}), "stream": False})
    assert made.status_code == 200, made.text
    yield running
    running.stop()


def upload(server, files: dict) -> dict:
    """Each file ({name: path or bytes}) uploaded as a blob: {name: digest}."""
    digests = {}
    for name, data in files.items():
        data = Path(data).read_bytes() if isinstance(data, Path) else data
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        assert server.client.post(f"/api/blobs/{digest}", content=data).status_code == 201
        digests[name] = digest
    return digests


def checkpoint_files(folder: Path) -> dict:
    return {path.name: path for path in sorted(folder.iterdir())}


def created(server, body: dict):
    """A non-streamed create, bounded in time, watched for memory."""
    start = tree_rss(server.proc.pid) / MiB
    with MemoryWatchdog(server.proc.pid, start + GROWTH_MIB):
        return server.client.post("/api/create", json={"stream": False, **body}, timeout=120)


def a_sentence(reply, status: int = 400) -> str:
    """The reply's error: status, one sentence, no Python exception's bare text."""
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert isinstance(error, str) and error.strip()
    assert not re.search(r"\b(Traceback|\w+Error:)", error), error
    return error


LIES = [({"num_hidden_layers": 10**9}, "config.json's num_hidden_layers is 1000000000, more "
                                       "than the 2 layers the checkpoint's tensors hold"),
        ({"vocab_size": 10**12}, "config.json's vocab_size is 1000000000000, more than the "
                                 "largest dimension of the checkpoint's tensors, 600"),
        ({"num_hidden_layers": "2"}, "config.json's num_hidden_layers is '2'; a whole number")]


@pytest.mark.parametrize("lie,words", LIES, ids=[str(lie) for lie, _ in LIES])
def test_a_checkpoint_whose_config_lies_is_refused_before_it_allocates(
        server, tiny, tmp_path, lie, words):
    hostile = rewritten(tiny[0], tmp_path / "hf", config=lie)
    reply = created(server, {"model": "hostile",
                             "files": upload(server, checkpoint_files(hostile))})
    assert words in a_sentence(reply)
    assert not list(server.store.glob(".work-*"))             # its scratch folder is gone


def malformed_checkpoints(tiny: Path, tmp_path: Path) -> dict:
    """name -> (files of a checkpoint with one file malformed, words its error holds)."""
    lying = safetensors({"model.embed_tokens.weight": {
        "dtype": "F32", "shape": [10**12, 64], "data_offsets": [0, 16]}}, bytes(16))
    cases = {"config not JSON": ({"config.json": "{nope"}, "config.json is not JSON"),
             "config a list": ({"config.json": "[1]"}, "config.json is not a JSON object"),
             "config of wrong types": ({"config.json": json.dumps({
                 **json.loads((tiny / "config.json").read_text()),
                 "rope_parameters": [1, 2]})}, "config.json's rope_parameters is [1, 2]"),
             "a lying safetensors header": ({"model.safetensors": lying},
                                            "has the shape [1000000000000, 64]"),
             "tokenizer not JSON": ({"tokenizer.json": "nope"}, "tokenizer.json is not JSON")}
    return {name: ({**checkpoint_files(rewritten(tiny, tmp_path / name.replace(" ", "-"),
                                                 files=files))}, words)
            for name, (files, words) in cases.items()}


@pytest.mark.parametrize("case", ["config not JSON", "config a list", "config of wrong types",
                                  "a lying safetensors header", "tokenizer not JSON"])
def test_a_malformed_checkpoint_is_refused_with_a_sentence(server, tiny, tmp_path, case):
    files, words = malformed_checkpoints(tiny[0], tmp_path)[case]
    reply = created(server, {"model": "malformed", "files": upload(server, files)})
    error = a_sentence(reply)
    assert error.startswith("The checkpoint cannot be converted. ") and words in error, error


def test_a_streamed_create_ends_in_the_same_sentence(server, tiny, tmp_path):
    hostile = rewritten(tiny[0], tmp_path / "hf", config={"num_hidden_layers": 10**9})
    lines = [json.loads(line) for line in server.client.post("/api/create", json={
        "model": "hostile", "files": upload(server, checkpoint_files(hostile))},
        timeout=120).text.splitlines()]
    assert lines[0] == {"status": "converting model"}
    assert "num_hidden_layers is 1000000000" in lines[-1]["error"]


MISSING = "sha256:" + "1" * 64
REQUESTS = {
    "a blob never uploaded": ({"files": {"model.gguf": MISSING}}, 400, "not found; upload it"),
    "a digest that is not sha256": ({"files": {"model.gguf": "md5:abc"}}, 400, "not found"),
    "a file that is not GGUF": ({"files": {"model.gguf": b"not a model"}}, 400,
                                "is not a GGUF file"),
    "a checkpoint file in a folder": ({"files": {"../x.safetensors": b"x"}}, 400,
                                      "is not a checkpoint file name"),
    "a checkpoint file of no checkpoint kind": ({"files": {"model.safetensors": b"x",
                                                           "run.sh": b"x"}}, 400,
                                                "'run.sh' is not a checkpoint file name"),
    "a model both from and in files": ({"from": "tiny", "files": {"model.gguf": "TINY"}}, 400,
                                       "either by 'from' or by 'files'"),
    "adapters": ({"from": "tiny", "adapters": {"lora.gguf": MISSING}}, 400,
                 "LoRA adapters ('adapters') are not supported"),
    "a quantization type that does not exist": ({"from": "tiny", "quantize": "q9_9"}, 400,
                                                "Unknown quantization type 'Q9_9'"),
    "from a model that does not exist": ({"from": "nosuch"}, 404, 'model "nosuch" not found'),
    "neither from nor files": ({}, 400, "neither 'from' nor 'files'"),
    "a checkpoint without its config": ({"files": {"model.safetensors": b"x" * 20}}, 400,
                                        "The checkpoint cannot be converted. The checkpoint "
                                        "has no config.json."),
}


@pytest.mark.parametrize("case", REQUESTS)
def test_a_malformed_create_request_is_a_4xx_with_one_sentence(server, tiny, case):
    body, status, words = REQUESTS[case]
    files = {name: (upload(server, {name: digest})[name] if isinstance(digest, bytes) else
                    upload(server, {name: tiny[1]})[name] if digest == "TINY" else digest)
             for name, digest in body.get("files", {}).items()}
    reply = created(server, {"model": "malformed", **body, **({"files": files} if files
                                                               else {})})
    error = a_sentence(reply, status)
    assert words in error and str(server.store) not in error, error
    names = [m["name"] for m in server.client.get("/api/tags").json()["models"]]
    assert "malformed:latest" not in names


def test_a_name_that_is_not_a_model_name_is_refused_before_any_conversion(server, tiny):
    reply = created(server, {"model": "bad name!",
                             "files": upload(server, checkpoint_files(tiny[0]))})
    assert a_sentence(reply).startswith("'bad name!' is not a model name ([host/]")


def conversion_children(server) -> list[psutil.Process]:
    """The server's processes running `runner convert`."""
    found = []
    for process in psutil.Process(server.proc.pid).children(recursive=True):
        try:
            if "convert" in process.cmdline():
                found.append(process)
        except psutil.Error:                           # gone meanwhile
            pass
    return found


def leave_during_conversion(server, files: dict, stream: bool) -> psutil.Process | None:
    """Ask for a conversion on a raw connection; once its child has started, freeze it
    (SIGSTOP: it can finish nothing while the server is asked to stop it) and close the
    connection. The frozen child, or None where the conversion ended before it was seen."""
    body = json.dumps({"model": "left", "files": files, "stream": stream}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as connection:
        connection.sendall(b"POST /api/create HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           b"Content-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = conversion_children(server)
            if found:
                found[0].send_signal(signal.SIGSTOP)
                return found[0]
            connection.settimeout(0.01)
            try:
                answer = connection.recv(65536, socket.MSG_PEEK)
            except TimeoutError:
                continue
            if not answer or b'"success"' in answer:
                return None                            # done before it was seen
    return None


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not streamed"])
def test_a_conversion_whose_client_leaves_is_stopped(server, tiny, stream):
    files = upload(server, checkpoint_files(tiny[0]))
    child = None
    try:
        for _ in range(5):                             # until one is caught converting
            child = leave_during_conversion(server, files, stream)
            if child is not None:
                break
        assert child is not None, "no conversion lasted long enough to be seen"
        gone, alive = psutil.wait_procs([child], timeout=30)
        assert gone and not alive, "the conversion went on after its client left"
        assert eventually(lambda: not list(server.store.glob(".work-*"))), "scratch left"
        names = [m["name"] for m in server.client.get("/api/tags").json()["models"]]
        assert "left:latest" not in names
    finally:
        for stray in conversion_children(server):
            stray.kill()


def test_a_copy_of_a_file_that_is_not_gguf_is_refused(server, tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"this is not a model")
    reply = server.client.post("/api/copy", json={"source": str(fake), "destination": "fake"})
    assert "cannot be copied: its file is not a GGUF file" in a_sentence(reply)
    assert not (server.store / "manifests" / "fake").exists()


def test_delete_removes_a_manifest_whatever_it_holds(server):
    digest = upload(server, {"x": b"not a model"})["x"]
    for name, text in (("spoiled", json.dumps({"model": digest})), ("cut", '{"model": "sha')):
        manifest = server.store / "manifests" / name / "latest.json"
        manifest.parent.mkdir(parents=True)
        manifest.write_text(text)
        reply = server.client.request("DELETE", "/api/delete", json={"model": name})
        assert reply.status_code == 200, reply.text
        assert not manifest.parent.exists()
    assert not (server.store / "blobs" / digest.replace(":", "-")).exists()


def test_a_digest_written_with_a_dash_names_its_blob(server, tiny):
    """sha256-<hex>, as blobs/ names files, is read as sha256:<hex> (it was a 500)."""
    digest = upload(server, {"model.gguf": tiny[1]})["model.gguf"].replace(":", "-")
    reply = created(server, {"model": "dashed", "files": {"model.gguf": digest}})
    assert reply.status_code == 200, reply.text
    assert server.client.request("DELETE", "/api/delete",
                                 json={"model": "dashed"}).status_code == 200
