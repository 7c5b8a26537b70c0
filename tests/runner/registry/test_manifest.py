"""A manifest is checked before anything is fetched: what is not one is refused with a
sentence naming the part and the value (errors.Refused, a 400 through the server)."""

from __future__ import annotations

import json

import pytest

from runner.registry.errors import Refused
from runner.registry.manifest import parse

DIGEST = "sha256:" + "ab" * 32
MODEL = "application/vnd.ollama.image.model"


def manifest(layers=None, **fields) -> bytes:
    layers = [{"mediaType": MODEL, "digest": DIGEST, "size": 10}] if layers is None else layers
    return json.dumps({"schemaVersion": 2, "layers": layers, **fields}).encode()


def test_a_manifest_gives_its_layers_and_config():
    found = parse(manifest(config={"mediaType": "x", "digest": "sha256:" + "cd" * 32,
                                   "size": 3}), "tiny:1b")
    assert [(layer.kind, layer.digest, layer.size) for layer in found.layers] == \
        [("model", DIGEST, 10)]
    assert found.config is not None and found.config.size == 3
    assert [layer.size for layer in found.blobs] == [10, 3]
    assert parse(manifest(config={}), "tiny:1b").config is None        # no digest: none


@pytest.mark.parametrize("size", [2**63, 1e300, 10.0, -1, "10", True, None, [10]],
                         ids=["2^63", "1e300", "10.0", "-1", "string", "bool", "null",
                              "list"])
def test_a_size_that_is_not_a_whole_number_of_bytes_is_refused(size):
    with pytest.raises(Refused, match="is not a size: a whole number of bytes") as error:
        parse(manifest([{"mediaType": MODEL, "digest": DIGEST, "size": size}]), "tiny:1b")
    assert error.value.status == 400 and "layer 0 of the manifest of tiny:1b" in \
        str(error.value)


@pytest.mark.parametrize("text,message", [
    (manifest(config="sha256:abc"), "The config of the manifest of tiny:1b is a JSON "
                                    "string, not an object"),
    (manifest(config={"digest": "sha256:xyz", "size": 1}), "The digest of the config"),
    (manifest(config={"digest": "sha256:" + "cd" * 32, "size": 1.5}), "not a size"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply to read"),
    (b'{"layers": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
    (b"{not json", "is not JSON"),
    (b'"a string"', "is a JSON string, not an object"),
    (manifest([]), "has no list of layers"),
    (json.dumps({"layers": "many"}).encode(), "has no list of layers"),
    (manifest(["a layer"]), "layer 0 of the manifest of tiny:1b is a JSON string"),
    (manifest([{"mediaType": 7, "digest": DIGEST, "size": 1}]), "mediaType"),
    (manifest([{"mediaType": MODEL, "digest": "sha256:../../etc", "size": 1}]),
     "not sha256:<64 hex digits>"),
    (manifest([{"mediaType": MODEL, "digest": DIGEST, "size": 1}] * 101),
     "has 101 layers, more than the 100"),
], ids=["string config", "config digest", "config size", "nested", "nested layers",
        "not json", "a string", "no layers", "layers a string", "layer a string",
        "media type", "digest", "too many layers"])
def test_what_is_not_a_manifest_is_refused_with_a_sentence(text, message):
    with pytest.raises(Refused, match=message) as error:
        parse(text, "tiny:1b")
    said = str(error.value)
    assert said.endswith(".") and "\n" not in said and len(said) < 300
