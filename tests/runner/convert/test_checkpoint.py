"""A checkpoint's files read with a sentence for each way they can be malformed: JSON that
does not parse or is not an object, a safetensors header that lies about its size, its
tensors' types, shapes or places, an index naming shards outside the folder."""

from __future__ import annotations

import struct

import pytest

from runner.convert.checkpoint import Checkpoint, CheckpointError

from tests.support.hostile_checkpoint import safetensors

CONFIG = '{"model_type": "qwen3"}'
EMBEDDINGS = "model.embed_tokens.weight"


def folder(tmp_path, files: dict):
    """A checkpoint folder of files ({name: bytes or text}), config.json by default."""
    for name, data in {"config.json": CONFIG, **files}.items():
        (tmp_path / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return tmp_path


def tensor(dtype="F32", shape=(2, 2), offsets=(0, 16)) -> dict:
    return {EMBEDDINGS: {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}}


LIES = {
    "a header longer than the file": (struct.pack("<Q", 2**63),
                                      "its header claims 9223372036854775808 bytes"),
    "three bytes": (b"abc", "it holds 3 bytes"),
    "a header that is not JSON": (struct.pack("<Q", 5) + b"nope!", "header is not JSON"),
    "a header that is a list": (struct.pack("<Q", 2) + b"[]", "(it holds a list)"),
    "data past the end": (safetensors(tensor(offsets=(0, 16))), "data offsets [0, 16], not a "
                          "range inside the file's 0 bytes"),
    "a shape larger than its data": (safetensors(tensor(shape=(10**12, 64)), bytes(16)),
                                     "the shape [1000000000000, 64] of 256000000000000 bytes"),
    "a shape that is text": (safetensors({EMBEDDINGS: {"dtype": "F32", "shape": "x",
                                                       "data_offsets": [0, 16]}}, bytes(16)),
                             "the shape 'x', not a list of whole numbers"),
    "a type it does not read": (safetensors(tensor(dtype="Q4")), "has type Q4"),
    "an entry that is a list": (safetensors({EMBEDDINGS: [1]}, bytes(16)),
                                "is described by a list"),
}


@pytest.mark.parametrize("data,words", LIES.values(), ids=LIES.keys())
def test_a_safetensors_header_that_lies_is_refused_before_any_tensor_is_read(
        tmp_path, data, words):
    with pytest.raises(CheckpointError) as refused:
        Checkpoint(folder(tmp_path, {"model.safetensors": data}))
    assert words in str(refused.value) and "model.safetensors" in str(refused.value)


def test_a_true_header_reads(tmp_path):
    data = struct.pack("<4f", 1, 2, 3, 4)
    found = Checkpoint(folder(tmp_path, {"model.safetensors": safetensors(tensor(), data)}))
    assert found.tensors[EMBEDDINGS].load().tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize("config,words", [
    ("{nope", "config.json is not JSON"),
    ("[1, 2]", "config.json is not a JSON object (it holds a list)"),
    ("[" * 100_000 + "]" * 100_000, "config.json nests its JSON too deeply"),
    (b"\xff\xfe\x00", "config.json is not JSON"),
], ids=["not JSON", "a list", "nested 100,000 deep", "not UTF-8"])
def test_a_config_that_is_not_a_json_object_is_named(tmp_path, config, words):
    with pytest.raises(CheckpointError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Checkpoint(folder(tmp_path, {"config.json": config}))


def test_an_index_names_only_shards_beside_it(tmp_path):
    escaping = '{"weight_map": {"a": "../elsewhere/model.safetensors"}}'
    with pytest.raises(CheckpointError, match="not a file name in the checkpoint's folder"):
        Checkpoint(folder(tmp_path, {"model.safetensors.index.json": escaping}))
    with pytest.raises(CheckpointError, match="no weight_map"):
        Checkpoint(folder(tmp_path, {"model.safetensors.index.json": '{"weight_map": 5}'}))
