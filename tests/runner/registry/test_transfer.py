"""Every answer a registry gives is read up to its bound (a manifest 4 MiB, a token 64 KiB,
an error's body 4 KiB), from a registry on loopback whose answers never end: the pull
fails with a sentence, having read little more than the bound."""

from __future__ import annotations

import pytest

from runner.registry.errors import PullError, Refused
from runner.registry.limits import Limits
from runner.registry.names import ModelName
from runner.registry.pull import pull
from runner.registry.transfer import Registry
from runner.serve.library.store import Library

from tests.support.hostile_registry import (HostileRegistry, challenge, endless, json_answer,
                                            manifest_of, manifest_path, model_layer)

MiB = 1 << 20
QUICK = Limits(answer_seconds=20)         # bounded, and long enough for a busy machine


@pytest.fixture()
def hostile():
    with HostileRegistry() as registry:
        yield registry


def registry_for(hostile, name: str) -> Registry:
    return Registry(ModelName.parse(f"http://{hostile.host}/{name}"), True, QUICK)


def test_a_manifest_that_never_ends_is_refused_past_4_mib(hostile):
    path = manifest_path("library/endless:latest")
    hostile.served.plant(path, endless(b'{"layers": ['))
    registry = registry_for(hostile, "library/endless")
    with pytest.raises(Refused, match="is more than 4 MiB; it was refused"):
        registry.manifest()
    registry.close()
    assert 4 * MiB < hostile.sent[path] < 32 * MiB      # the bound, and what buffers held


def test_a_manifest_that_says_it_is_too_long_is_not_read(hostile):
    path = manifest_path("library/long:latest")
    hostile.served.plant(path, json_answer("x" * (5 * MiB)))
    with pytest.raises(Refused, match="more than 4 MiB"):
        registry_for(hostile, "library/long").manifest()


def test_a_token_answer_that_never_ends_is_refused(hostile):
    hostile.served.plant(manifest_path("library/private:latest"),
                         challenge(hostile.host, "/endless-token"))
    hostile.served.plant("/endless-token", endless(b'{"token": "'))
    with pytest.raises(PullError, match="token answer of .* is more than 64 KiB") as error:
        registry_for(hostile, "library/private").manifest()
    assert error.value.status == 502 and hostile.sent["/endless-token"] < 32 * MiB


def test_an_error_body_that_never_ends_is_read_to_4_kib(hostile):
    path = manifest_path("library/failing:latest")
    hostile.served.plant(path, endless(b'{"errors": ["' + b"x" * 300, status=500))
    with pytest.raises(PullError, match=r"answered 500 for the manifest \(\{\"errors\"") as \
            error:
        registry_for(hostile, "library/failing").manifest()
    assert len(str(error.value)) < 300 and hostile.sent[path] < 32 * MiB


def test_a_refused_manifest_leaves_nothing_in_the_store(hostile, tmp_path):
    hostile.served.plant(manifest_path("library/odd:latest"), json_answer(manifest_of(
        [model_layer(size=1.5)])))
    library = Library(tmp_path / "store")
    with pytest.raises(Refused, match="not a size"):
        pull(f"http://{hostile.host}/library/odd", library, insecure=True, limits=QUICK)
    assert not library.blobs.exists() or list(library.blobs.iterdir()) == []
