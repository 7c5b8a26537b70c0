"""hf.co names from a Hugging Face-shaped server on loopback (HF_ENDPOINT): the file listing
is read within a manifest's bounds (4 MiB a page, RUNNER_PULL_TIMEOUT), a file is fetched as
a registry's blob and checked against the sha256 Git LFS gives it, and a file without one
is refused."""

from __future__ import annotations

import json
import os

import pytest

from runner.registry.errors import PullError, Refused
from runner.registry.limits import Limits
from runner.registry.pull import pull
from runner.serve.library.store import Library

from tests.support.hostile_registry import HostileRegistry, endless, json_answer, trickle

TREE = "/api/models/someone/Tiny-GGUF/tree/main"


@pytest.fixture()
def hub(monkeypatch):
    with HostileRegistry() as registry:
        monkeypatch.setenv("HF_ENDPOINT", f"http://{registry.host}")
        monkeypatch.setenv("HF_TOKEN", "")
        yield registry


def test_a_listing_that_never_ends_is_refused_past_4_mib(hub, tmp_path):
    hub.served.plant(TREE, endless(b'[{"type": "file", "path": "'))
    with pytest.raises(Refused, match="files of someone/Tiny-GGUF is more than 4 MiB"):
        pull("hf.co/someone/Tiny-GGUF", Library(tmp_path / "store"), limits=Limits())
    assert hub.sent[TREE] < 32 << 20


def test_a_trickled_listing_meets_its_deadline(hub, tmp_path):
    body = json.dumps([{"type": "file", "path": "Tiny-Q4_K_M.gguf", "size": 10}]).encode()
    hub.served.plant(TREE, trickle(body, 0.25))
    with pytest.raises(PullError, match="took more than 1 seconds to list the files"):
        pull("hf.co/someone/Tiny-GGUF", Library(tmp_path / "store"),
             limits=Limits(answer_seconds=1))
    assert hub.sent[TREE] < len(body) / 2


def test_a_gguf_hugging_face_gives_no_sha256_for_is_refused(hub, tmp_path):
    hub.served.plant(TREE, json_answer([{"type": "file", "path": "Tiny-Q4_K_M.gguf",
                                         "size": 10, "oid": "0" * 40}]))
    with pytest.raises(Refused, match="not stored with Git LFS"):
        pull("hf.co/someone/Tiny-GGUF", Library(tmp_path / "store"), limits=Limits())


def test_a_file_is_fetched_as_a_blob_and_checked_against_its_sha256(hub, tmp_path):
    (tmp_path / "tiny.gguf").write_bytes(os.urandom(1 << 20))
    blob = hub.served.add_blob(tmp_path / "tiny.gguf")
    wrong = "0" * 64
    hub.served.repos["someone/Tiny-GGUF"] = {"Tiny-Q4_K_M.gguf": blob}
    library = Library(tmp_path / "store")
    with pytest.raises(PullError, match="not a GGUF"):         # random bytes, verified
        pull("hf.co/someone/Tiny-GGUF", library, limits=Limits())
    assert (library.blobs / f"sha256-{blob.digest[7:]}").exists()
    hub.served.plant(TREE, json_answer([{"type": "file", "path": "Tiny-Q4_K_M.gguf",
                                         "size": blob.size, "lfs": {"oid": wrong,
                                                                    "size": blob.size}}]))
    hub.served.blobs.pop(blob.digest)
    with pytest.raises(PullError, match="not its digest; it was removed"):
        pull("hf.co/someone/Tiny-GGUF", library, limits=Limits())
    assert not list(library.blobs.glob(f"sha256-{wrong}*"))
