"""Models made from malformed GGUF files, served: a hyper-parameter that ggml asserts on (the
runner died by SIGABRT), that spun a core for minutes (no answer), that divided by zero or
overflowed, block counts and vocabularies the tensors do not hold, a header whose alignment
or tensor offsets are wrong. Each chat ends in an error whose sentence names the key, as soon
as the runner has read the file (its /load refuses it); the server stays up, watched for
memory, and another model still answers."""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path

import gguf
import numpy as np
import pytest

from tests.support.gguf_edit import Typed, retensor, rewrite
from tests.support.server import ServerProcess
from tests.support.tiny import llama_tensors, write_llama
from tests.support.watchdog import MemoryWatchdog, tree_rss

pytestmark = pytest.mark.server

MiB = 1 << 20
GROWTH_MIB = 600                 # what a probe may cost the server and its runners, at most
ANSWER_SECONDS = 60              # each reply's bound (the spinning file gave none in 90 s)
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny llama with a chat template (its tokens are the characters ! to `)."""
    work = tmp_path_factory.mktemp("tiny")
    plain = write_llama(work / "plain.gguf", llama_tensors(np.random.default_rng(0)))
    return rewrite(plain, work / "tiny.gguf", values={"tokenizer.chat_template": TEMPLATE})


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny):
    running = ServerProcess(tmp_path_factory.mktemp("store"), tmp_path_factory.mktemp("serve"))
    create(running, "good", tiny)
    yield running
    running.stop()


def create(server, name: str, path: Path):
    data = path.read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert server.client.post(f"/api/blobs/{digest}", content=data).status_code == 201
    return server.client.post("/api/create", json={
        "model": name, "files": {"model.gguf": digest}, "stream": False}, timeout=60)


def chat(server, name: str):
    return server.client.post("/api/chat", json={
        "model": name, "messages": [{"role": "user", "content": "ABC"}], "stream": False,
        "options": {"num_predict": 2}}, timeout=ANSWER_SECONDS)


def values(changes: dict):
    return lambda tiny, target: rewrite(tiny, target, values=changes)


def offset_of(path: Path, name: str) -> int:
    from pyggml.gguf_reader import Header

    header = Header(path)
    start = min(t.offset for t in header.tensors)
    return next(t.offset for t in header.tensors if t.name == name) - start


MALFORMED = {
    "rope past the head": (values({"llama.rope.dimension_count": 512}),
                           r"llama.rope.dimension_count is 512, larger than the head \(8\)"),
    "eps -1": (values({"llama.attention.layer_norm_rms_epsilon": -1.0}),
               "llama.attention.layer_norm_rms_epsilon is -1.0, not a positive finite number"),
    "rope of no dimensions": (values({"llama.rope.dimension_count": 0}),
                              "llama.rope.dimension_count is 0, not a positive whole number"),
    "rope base NaN": (values({"llama.rope.freq_base": math.nan}),
                      "llama.rope.freq_base is nan, not a positive finite number"),
    "no heads": (values({"llama.attention.head_count": 0}),
                 "llama.attention.head_count is 0, not a positive whole number"),
    "KV heads not dividing the heads": (values({"llama.attention.head_count_kv": 3}),
                                        "llama.attention.head_count_kv is 3, which does not "
                                        "divide"),
    "a context length that is no number": (
        values({"llama.context_length": Typed("long", gguf.GGUFValueType.STRING)}),
        "llama.context_length is 'long', not a positive whole number"),
    "a context length that is an array": (
        values({"llama.context_length": Typed([1, 2], gguf.GGUFValueType.ARRAY,
                                              gguf.GGUFValueType.UINT32)}),
        r"llama.context_length is \[1, 2\], an array where one number belongs"),
    "no blocks": (values({"llama.block_count": 0}), "llama.block_count is 0"),
    "blocks the file lacks": (values({"llama.block_count": 9}),
                              "llama.block_count is 9, more than the 2 blocks"),
    "more tokens than embeddings": (
        values({"tokenizer.ggml.tokens": [f"t{i}" for i in range(100)],
                "llama.vocab_size": 64}),
        "tokenizer.ggml.tokens holds 100 tokens, more than the 64 rows"),
    "alignment 0": (values({"general.alignment": 0}),
                    "general.alignment is 0, not a power of two"),
    "a tensor off the alignment": (
        lambda tiny, target: retensor(tiny, target, "output_norm.weight",
                                      offset=offset_of(tiny, "output_norm.weight") + 4),
        "output_norm.weight starts at offset .*, not a multiple of the file's alignment"),
    "two tensors on the same data": (
        lambda tiny, target: retensor(tiny, target, "output_norm.weight",
                                      offset=offset_of(tiny, "token_embd.weight")),
        "the data of tensors .* overlap"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_file_is_answered_with_the_sentence(server, tiny, tmp_path, case):
    make, sentence = MALFORMED[case]
    path = make(tiny, tmp_path / "malformed.gguf")
    name = re.sub(r"[^a-z0-9]+", "-", case.lower())
    start = tree_rss(server.proc.pid) / MiB
    with MemoryWatchdog(server.proc.pid, start + GROWTH_MIB):
        made = create(server, name, path)
        reply = chat(server, name) if made.status_code == 200 else made
    assert 400 <= reply.status_code < 600, reply.text
    assert re.search(sentence, reply.json()["error"]), reply.json()
    assert server.client.get("/").status_code == 200
    good = chat(server, "good")
    assert good.status_code == 200 and good.json()["done"], good.text


def test_a_context_length_past_int32_serves(server, tiny, tmp_path):
    """2^32 - 1 is a maximum (it overflowed ggml's int32 on the first batch, a 500)."""
    path = rewrite(tiny, tmp_path / "long.gguf", values={"llama.context_length": 2**32 - 1})
    assert create(server, "long", path).status_code == 200
    reply = chat(server, "long")
    assert reply.status_code == 200 and reply.json()["done"], reply.text
