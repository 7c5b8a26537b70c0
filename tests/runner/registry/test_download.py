"""A blob's download against what its manifest says: a registry whose blob is another size
than the manifest's is refused at its first answer and leaves nothing; a size the disk
cannot hold is refused before anything is written; a pull's lock files go with it; and an
unfinished download older than its age limit is removed by the next pull, a younger one
kept to resume."""

from __future__ import annotations

import os
import time

import pytest

from runner.registry import download
from runner.registry.errors import PullError, Refused
from runner.registry.limits import Limits
from runner.registry.pull import pull
from runner.serve.library.store import Library

from tests.support.registry_server import RegistryServer, Served

MiB = 1 << 20
NAME = "library/blob:1b"


@pytest.fixture()
def registry(tmp_path, monkeypatch):
    """A model of one 24 MiB layer (random bytes), in parts of 8 MiB."""
    monkeypatch.setattr(download, "PART_MIN", 8 * MiB)
    monkeypatch.setattr(download, "BACKOFF", 0.0)
    (tmp_path / "blob").write_bytes(os.urandom(24 * MiB))
    served = Served()
    served.add_model(NAME, [("model", tmp_path / "blob")])
    server = RegistryServer(served)
    yield server
    server.close()


def layer(registry) -> dict:
    return registry.served.manifests[NAME]["layers"][0]


def pulled(registry, library: Library, **limits):
    return pull(f"http://{registry.host}/{NAME}", library, insecure=True,
                limits=Limits(**limits))


def debris(library: Library) -> list[str]:
    return sorted(p.name for p in library.blobs.iterdir() if "partial" in p.name or
                  p.name.endswith(".lock")) if library.blobs.exists() else []


@pytest.mark.parametrize("size", [24 * MiB + 1, 24 * MiB - 1, 40 * MiB, 1],
                         ids=["a byte more", "a byte less", "more parts", "one byte"])
def test_a_size_the_registry_contradicts_is_refused_and_leaves_nothing(registry, tmp_path,
                                                                        size):
    layer(registry)["size"] = size
    library = Library(tmp_path / "store")
    with pytest.raises(Refused, match="nothing of it was kept") as error:
        pulled(registry, library)
    assert error.value.status == 400
    blob = library.blobs / f"sha256-{layer(registry)['digest'][7:]}"
    assert debris(library) == [] and not blob.exists()


def test_a_size_beyond_the_free_disk_is_refused_before_anything_is_written(registry,
                                                                           tmp_path):
    layer(registry)["size"] = 1 << 60
    library = Library(tmp_path / "store")
    with pytest.raises(PullError, match="MB free; free some space") as error:
        pulled(registry, library)
    assert error.value.status == 507 and debris(library) == []
    assert registry.served.ranges(layer(registry)["digest"]) == []


def test_a_failed_pull_leaves_no_lock_files_and_a_pull_resumes(registry, tmp_path,
                                                              monkeypatch):
    monkeypatch.setattr(download, "MAX_TRIES", 1)
    digest, library = layer(registry)["digest"], Library(tmp_path / "store")
    registry.served.cut[digest] = 3 * MiB
    registry.served.refuse_after_cut = True
    with pytest.raises(PullError, match="pull again to resume"):
        pulled(registry, library)
    left = debris(library)
    assert f"sha256-{digest[7:]}-partial" in left and not any(".lock" in n for n in left)
    registry.served.refuse_after_cut = False
    with pytest.raises(PullError, match="not a GGUF file"):   # random bytes, whole now
        pulled(registry, library)
    assert debris(library) == [] and (library.blobs / f"sha256-{digest[7:]}").exists()


def test_unfinished_downloads_past_their_age_are_swept_by_the_next_pull(registry,
                                                                        tmp_path):
    library = Library(tmp_path / "store")
    library.blobs.mkdir(parents=True)
    old, young = "sha256-" + "1" * 64, "sha256-" + "2" * 64
    for stem in (old, young):
        for suffix in ("-partial", "-partial-0", "-partial-3"):
            (library.blobs / (stem + suffix)).write_bytes(b"{}")
    week_ago = time.time() - 8 * 86400
    for path in library.blobs.glob(old + "*"):
        os.utime(path, (week_ago, week_ago))
    with pytest.raises(PullError, match="not a GGUF file"):   # random bytes, whole
        pulled(registry, library, partial_days=7)
    assert debris(library) == [young + "-partial", young + "-partial-0", young + "-partial-3"]
