"""Pulling from a registry on loopback (registry_server.py, serving the catalog's GGUFs as
blobs): the store's model afterwards, parallel ranges, a cut connection resumed, a pull
killed and resumed by the next, a corrupted blob refused, a token asked for, and the
errors (no such model, plain HTTP without --insecure, nothing listening), each leaving
nothing behind where a model is looked up."""

from __future__ import annotations

import json

import pytest

from runner.loading import store
from runner.registry import download, transfer
from runner.registry.pull import pull
from runner.registry.transfer import PullError
from runner.serve.library.store import Library, ModelNotFound

from tests.support.registry_server import GO_TEMPLATE, PARAMS, SYSTEM, RegistryServer, Served

MiB = 1 << 20


@pytest.fixture()
def layers(model_paths, tmp_path):
    """The layers of a model as Ollama's library publishes one: GGUF, template, system,
    params, license."""
    files = {"template": GO_TEMPLATE, "system": SYSTEM, "params": json.dumps(PARAMS),
             "license": "Apache 2.0"}
    for kind, text in files.items():
        (tmp_path / kind).write_text(text)
    return [("model", model_paths["smollm2"])] + [(k, tmp_path / k) for k in files]


@pytest.fixture()
def registry(layers):
    served = Served()
    served.add_model("library/tiny:1b", layers)
    server = RegistryServer(served)
    yield server
    server.close()


@pytest.fixture()
def quick(monkeypatch):
    """Retries without waiting, parts of 8 MiB (the blob in several, fetched in parallel)."""
    monkeypatch.setattr(download, "BACKOFF", 0.0)
    monkeypatch.setattr(download, "PART_MIN", 8 * MiB)


def name_at(registry, name="library/tiny:1b"):
    return f"http://{registry.host}/{name}"


def model_digest(registry):
    return registry.served.manifests["library/tiny:1b"]["layers"][0]["digest"]


def pulled(library: Library) -> list[str]:
    """The names of the models pulled into library (the catalog's files live elsewhere)."""
    return [e.name for e in library.list() if e.name not in store.CATALOG]


def leftovers(library: Library) -> list[str]:
    return sorted(p.name for p in library.blobs.glob("*partial*")) if library.blobs.exists() \
        else []


def test_a_pulled_model_is_in_the_store_with_its_layers(registry, tmp_path, model_paths,
                                                        quick):
    library, events = Library(tmp_path / "store"), []
    entry = pull(name_at(registry), library, insecure=True, progress=events.append)
    display = f"{registry.host}/library/tiny:1b"
    assert entry.name == display and entry.path.read_bytes() == \
        model_paths["smollm2"].read_bytes()
    assert entry.digest == model_digest(registry)[7:]
    assert entry.go_template == GO_TEMPLATE and entry.system == SYSTEM
    assert entry.parameters == PARAMS and entry.license == "Apache 2.0"
    assert entry.chat_template == entry.metadata["tokenizer.chat_template"]   # the GGUF's wins
    assert pulled(library) == [display]
    statuses = [e["status"] for e in events]
    assert statuses[0] == "pulling manifest" and statuses[-3:] == [
        "verifying sha256 digest", "writing manifest", "success"]
    progress = [e for e in events if e.get("digest") == model_digest(registry)]
    assert progress[-1]["completed"] == progress[-1]["total"] == entry.size
    ranges = registry.served.ranges(model_digest(registry))
    assert len(ranges) == -(-entry.size // (8 * MiB)) > 1            # one request a part
    assert leftovers(library) == []
    again = pull(name_at(registry), library, insecure=True)          # present: nothing fetched
    assert again.path == entry.path
    assert len(registry.served.ranges(model_digest(registry))) == len(ranges)


def test_a_cut_connection_is_resumed_where_it_stopped(registry, tmp_path, quick):
    digest = model_digest(registry)
    registry.served.cut[digest] = 3 * MiB + 17
    entry = pull(name_at(registry), Library(tmp_path / "store"), insecure=True)
    assert entry.digest == digest[7:]
    starts = [int(r[6:].split("-")[0]) for r in registry.served.ranges(digest)]
    cut_at = registry.served.was_cut[digest] + 3 * MiB + 17   # parts race: any one was cut
    parts = range(0, entry.size, 8 * MiB)
    resumed = [s for s in starts if s not in parts]
    assert sorted(set(starts) & set(parts)) == list(parts) and len(starts) == len(parts) + 1
    assert len(resumed) == 1                           # the rest of that part, asked once
    assert cut_at - 64 * 1024 <= resumed[0] <= cut_at  # from where its bytes stopped


def test_a_pull_cut_short_is_resumed_by_the_next(registry, tmp_path, quick, monkeypatch):
    monkeypatch.setattr(download, "MAX_TRIES", 2)
    monkeypatch.setattr(download, "PARTS", 1)
    monkeypatch.setattr(download, "PART_MIN", 1 << 40)              # one part: a clear count
    digest, library = model_digest(registry), Library(tmp_path / "store")
    registry.served.cut[digest] = 5 * MiB
    registry.served.refuse_after_cut = True
    with pytest.raises(PullError, match="failed 2 times.*pull again to resume"):
        pull(name_at(registry), library, insecure=True)
    with pytest.raises(ModelNotFound):
        library.get(f"{registry.host}/library/tiny:1b")
    assert leftovers(library) == [f"sha256-{digest[7:]}-partial",
                                  f"sha256-{digest[7:]}-partial-0"]
    registry.served.refuse_after_cut = False
    entry = pull(name_at(registry), library, insecure=True)
    assert entry.digest == digest[7:] and leftovers(library) == []
    resumed_at = int(registry.served.ranges(digest)[-1][6:].split("-")[0])
    assert 5 * MiB - 64 * 1024 <= resumed_at <= 5 * MiB          # not from the start


def test_a_corrupted_blob_is_refused_and_removed(registry, tmp_path, quick):
    digest, library = model_digest(registry), Library(tmp_path / "store")
    registry.served.corrupt.add(digest)
    with pytest.raises(PullError, match="not its digest; it was removed"):
        pull(name_at(registry), library, insecure=True)
    assert not (library.blobs / f"sha256-{digest[7:]}").exists()
    assert leftovers(library) == [] and pulled(library) == []


def test_a_registry_that_wants_a_token_gets_one(registry, tmp_path, quick):
    registry.served.token = True
    entry = pull(name_at(registry), Library(tmp_path / "store"), insecure=True)
    assert entry.size > 0
    assert any(path.startswith("/token?") for _, path, _ in registry.served.requests)


@pytest.mark.parametrize("name,insecure,message", [
    ("library/absent:1b", True, "has no model library/absent:1b"),
    ("library/tiny:1b", False, "plain HTTP; pull with --insecure"),
])
def test_errors_are_one_sentence_and_store_nothing(registry, tmp_path, name, insecure,
                                                   message):
    library = Library(tmp_path / "store")
    with pytest.raises(PullError, match=message):
        pull(name_at(registry, name), library, insecure=insecure)
    assert pulled(library) == [] and leftovers(library) == []


def test_no_network_is_said_plainly(tmp_path):
    from tests.support.rpc_servers import free_port

    with pytest.raises(PullError, match="Could not reach the registry"):
        pull(f"http://127.0.0.1:{free_port()}/library/tiny", Library(tmp_path / "s"),
             insecure=True)


def test_a_full_disk_is_said_plainly_and_keeps_the_parts(registry, tmp_path, quick,
                                                         monkeypatch):
    import errno
    import os

    def pwrite(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(download.os, "pwrite", pwrite)
    library = Library(tmp_path / "store")
    with pytest.raises(PullError, match="No space left on the disk") as error:
        pull(name_at(registry), library, insecure=True)
    assert error.value.status == 507 and pulled(library) == []
    assert not (library.blobs / f"sha256-{model_digest(registry)[7:]}").exists()


def test_a_model_layer_that_is_not_a_gguf_is_refused(tmp_path, quick):
    (tmp_path / "weights.bin").write_bytes(b"not a GGUF file at all")
    served = Served()
    served.add_model("library/odd:1b", [("model", tmp_path / "weights.bin")])
    server = RegistryServer(served)
    try:
        library = Library(tmp_path / "store")
        with pytest.raises(PullError, match="not a GGUF file this runner reads"):
            pull(f"http://{server.host}/library/odd:1b", library, insecure=True)
        assert pulled(library) == []
    finally:
        server.close()


@pytest.mark.parametrize("file_locks", [True, False], ids=["flock", "no-flock"])
def test_two_pulls_of_one_model_at_once_fetch_it_once(registry, tmp_path, quick, monkeypatch,
                                                     file_locks):
    """Two clients pulling the same model together (a UI and a CLI, say): the blob is
    fetched once, both pulls succeed, nothing is left half-written (where there are no file
    locks, as on Windows, the pulls of one process still take turns)."""
    from concurrent.futures import ThreadPoolExecutor

    if not file_locks:
        monkeypatch.setattr(transfer, "fcntl", None)

    library = Library(tmp_path / "store")
    with ThreadPoolExecutor(2) as pool:
        entries = list(pool.map(lambda _: pull(name_at(registry), library, insecure=True),
                                range(2)))
    assert entries[0].path == entries[1].path and entries[0].size > 0
    parts = -(-entries[0].size // (8 * MiB))
    assert len(registry.served.ranges(model_digest(registry))) == parts
    assert leftovers(library) == [] and pulled(library) == [entries[0].name]
    assert list(library.blobs.glob(".*.lock")) == []
