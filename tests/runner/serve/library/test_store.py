"""The store's copy and delete as a hostile or unlucky store meets them: a copy of a file that
is not GGUF is refused (it made a name nothing could load, which delete then refused to
remove), and delete removes any manifest the store holds, however broken, with the blobs
only it named."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from runner.serve.library.store import Library, ModelNotFound

from tests.support.tiny import llama_tensors, write_llama


@pytest.fixture
def library(tmp_path):
    return Library(tmp_path / "store")


@pytest.fixture
def model(tmp_path):
    return write_llama(tmp_path / "tiny.gguf", llama_tensors(np.random.default_rng(0)))


def blob(library, data: bytes) -> str:
    """data as a blob; its digest (sha256:<hex>)."""
    digest = hashlib.sha256(data).hexdigest()
    library.blobs.mkdir(parents=True, exist_ok=True)
    (library.blobs / f"sha256-{digest}").write_bytes(data)
    return f"sha256:{digest}"


def manifest(library, name: str, text: str):
    path = library.manifests / name / "latest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_copy_of_a_file_that_is_not_gguf_is_refused(library, tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"this is not a model")
    with pytest.raises(ValueError, match=r'model ".*fake.gguf" cannot be copied: its file is '
                                         "not a GGUF file"):
        library.copy(str(fake), "copied")
    manifest(library, "spoiled", json.dumps({"model": blob(library, b"not a model either")}))
    with pytest.raises(ValueError, match='model "spoiled" cannot be copied'):
        library.copy("spoiled", "copied")
    assert not (library.manifests / "copied").exists()


def test_a_copy_of_a_model_shares_its_file(library, model):
    library.create("original", blob(library, model.read_bytes()))
    library.copy("original", "copied:v2")
    assert library.get("copied:v2").path == library.get("original").path


@pytest.mark.parametrize("text", [
    "{not json", "[1, 2]", json.dumps({"model": 5}), json.dumps({"template": "x"}),
    json.dumps({"model": "sha256:" + "1" * 64}),            # its blob is gone
    "BLOB",                                                 # a blob that is not GGUF
], ids=["not JSON", "a list", "model a number", "no model", "blob gone", "not GGUF"])
def test_delete_removes_a_broken_manifest_and_the_blob_only_it_names(library, text):
    named = blob(library, b"not a model")
    path = manifest(library, "broken", text.replace("BLOB", json.dumps({"model": named})))
    assert library.delete("broken") == "broken:latest"
    assert not path.exists() and not (library.manifests / "broken").exists()
    kept = (library.blobs / named.replace(":", "-")).exists()
    assert kept == (text != "BLOB")               # another manifest named it not: removed
    with pytest.raises(ModelNotFound):
        library.delete("broken")


def test_delete_keeps_a_blob_another_manifest_names_even_a_broken_one(library, model):
    digest = blob(library, model.read_bytes())
    library.create("one", digest)
    gone = "sha256:" + "2" * 64                  # its projector is gone: it lists not
    manifest(library, "other", json.dumps({"model": digest, "projector": gone}))
    library.delete("one")
    assert (library.blobs / digest.replace(":", "-")).exists()
    library.delete("other")
    assert not (library.blobs / digest.replace(":", "-")).exists()


def test_a_malformed_manifest_reads_as_a_sentence_naming_the_model(library):
    manifest(library, "cut", '{"model": "sha256:')
    with pytest.raises(ValueError, match='the manifest of model "cut:latest" is not JSON'):
        library.get("cut")
    manifest(library, "odd", json.dumps({"model": ["x"]}))
    with pytest.raises(ValueError, match='the manifest of model "odd:latest" is malformed'):
        library.get("odd")
    assert not {"cut:latest", "odd:latest"} & {entry.name for entry in library.list()}
