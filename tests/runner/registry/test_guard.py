"""A pull's guard: a manifest trickled a byte at a time (its headers too) meets its deadline,
a blob's stream that brings too little in its window is cut and retried from where it
stopped, and a pull whose event is set stops at once, wherever its reads wait, keeping what
arrived. Bounded by the registry's bytes, not by the clock: each probe's answer would take a
minute or more to end by itself."""

from __future__ import annotations

import json
import threading

import pytest

from runner.registry import download
from runner.registry.errors import Cancelled, PullError
from runner.registry.limits import Limits
from runner.registry.pull import pull
from runner.serve.library.store import Library

from tests.support.hostile_registry import (HostileRegistry, blob_path, json_answer,
                                            manifest_of, manifest_path, model_layer,
                                            slow_blob, trickle)
from tests.support.server import eventually

SLOW = "sha256:" + "5" * 64


@pytest.fixture()
def hostile():
    with HostileRegistry() as registry:
        yield registry


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_a_trickled_manifest_meets_its_deadline(hostile, tmp_path, headers_too):
    path = manifest_path("library/slow:latest")
    body = json.dumps(manifest_of([model_layer()])).encode()
    hostile.served.plant(path, trickle(body, 0.25, headers_too=headers_too))
    with pytest.raises(PullError, match="took more than 1 seconds to send the manifest"):
        pull(f"http://{hostile.host}/library/slow", Library(tmp_path / "store"), True,
             limits=Limits(answer_seconds=1))
    assert hostile.sent.get(path, 0) < len(body) / 2


def slow_model(hostile, size: int, chunk: int, every: float) -> str:
    hostile.served.plant(manifest_path("library/slow:latest"), json_answer(manifest_of(
        [model_layer(SLOW, size)])))
    path = blob_path("library/slow", SLOW)
    hostile.served.plant(path, slow_blob(size, chunk, every))
    return path


def test_a_stalled_blob_is_retried_from_where_it_stopped(hostile, tmp_path, monkeypatch):
    monkeypatch.setattr(download, "BACKOFF", 0.0)
    monkeypatch.setattr(download, "MAX_TRIES", 3)
    path = slow_model(hostile, 1 << 20, 1, 0.2)             # 5 bytes a second: 58 hours
    library = Library(tmp_path / "store")
    with pytest.raises(PullError, match="failed 3 times .*sent less than 262,144 bytes in 1 "
                                        "seconds.*what arrived is kept"):
        pull(f"http://{hostile.host}/library/slow", library, True,
             limits=Limits(stall_seconds=1))
    starts = [int(r[6:].split("-")[0]) for _, p, r in hostile.served.requests if p == path]
    assert len(starts) == 3 and starts[0] == 0 and 0 < starts[1] < starts[2]   # resumed
    assert (library.blobs / f"sha256-{SLOW[7:]}-partial").exists()


def test_a_cancelled_pull_stops_at_once_and_keeps_its_parts(hostile, tmp_path, monkeypatch):
    monkeypatch.setattr(download, "PART_MIN", 1 << 20)
    monkeypatch.setattr(download, "PART_MAX", 1 << 20)
    path = slow_model(hostile, 64 << 20, 64 << 10, 0.1)     # 64 parts, 16 at a time
    library, cancelled, failed = Library(tmp_path / "store"), threading.Event(), []

    def pulling():
        try:
            pull(f"http://{hostile.host}/library/slow", library, True, cancelled=cancelled,
                 limits=Limits())
        except PullError as error:
            failed.append(error)

    puller = threading.Thread(target=pulling)
    puller.start()
    assert eventually(lambda: hostile.sent.get(path, 0) > 4 << 20)
    records = [json.loads(path.read_text()) for path in
               library.blobs.glob(f"sha256-{SLOW[7:]}-partial-*") if path.suffix != ".tmp"]
    assert 0 < len(records) < 64                           # only the parts begun: lazily,
    assert all(record["completed"] > 0 for record in records)     # once their bytes came
    cancelled.set()
    puller.join(30)
    assert not puller.is_alive() and isinstance(failed[0], Cancelled)
    assert failed[0].status == 499 and "pull again to resume" in str(failed[0])
    assert eventually(lambda: hostile.served.answering.get(path) == 0)
    assert (library.blobs / f"sha256-{SLOW[7:]}-partial").exists()
    assert list(library.blobs.glob(".*.lock")) == []
