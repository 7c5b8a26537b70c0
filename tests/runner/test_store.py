"""The model store: names, paths, verification."""

from __future__ import annotations

import dataclasses

import pytest

from runner import store


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
