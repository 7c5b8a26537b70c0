"""Fill-in-the-middle: FIM tokens found as llama.cpp finds them, the prefix-suffix-middle
prompt, and a generate request's suffix reaching the model through the server (a tiny Qwen
whose file names three of its tokens as the FIM ones)."""

from __future__ import annotations

import pytest

from runner.loading.loader import open_model
from runner.serve.formats.fim import fim_prompt, fim_tokens

from tests.support.gguf_edit import rewrite
from tests.support.server import ServerProcess

QWEN_CODER = {"tokenizer.ggml.tokens": ["a", "<|fim_prefix|>", "<|fim_suffix|>",
                                        "<|fim_middle|>", "<|fim_pad|>"]}


def test_fim_tokens_from_keys_or_from_their_texts():
    assert fim_tokens(QWEN_CODER) == {"pre": "<|fim_prefix|>", "suf": "<|fim_suffix|>",
                                      "mid": "<|fim_middle|>"}
    codellama = {"tokenizer.ggml.tokens": ["▁<PRE>", "▁<SUF>", "▁<MID>", "x"]}
    assert fim_tokens(codellama) == {"pre": "▁<PRE>", "suf": "▁<SUF>", "mid": "▁<MID>"}
    keyed = {"tokenizer.ggml.tokens": ["p", "s", "m"], "tokenizer.ggml.fim_pre_token_id": 0,
             "tokenizer.ggml.fim_suf_token_id": 1, "tokenizer.ggml.fim_mid_token_id": 2}
    assert fim_tokens(keyed) == {"pre": "p", "suf": "s", "mid": "m"}
    assert fim_tokens({"tokenizer.ggml.tokens": ["<|fim_prefix|>", "<|fim_suffix|>"]}) is None
    assert fim_prompt(fim_tokens(QWEN_CODER), "def f(", "\n    return x") == \
        "<|fim_prefix|>def f(<|fim_suffix|>\n    return x<|fim_middle|>"


@pytest.fixture(scope="module")
def coder(tiny_models, tmp_path_factory):
    """tiny-qwen whose file names <|im_start|>, <|im_end|> and <|endoftext|> as its FIM
    tokens (its only special ones: a real coder's are its own; the plumbing is the same)."""
    work = tmp_path_factory.mktemp("coder")
    opened = open_model(tiny_models["qwen"])
    tokens = opened.metadata["tokenizer.ggml.tokens"]
    opened.close()
    ids = [tokens.index(t) for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>")]
    path = rewrite(tiny_models["qwen"], work / "coder.gguf", values={
        "tokenizer.ggml.fim_pre_token_id": ids[0], "tokenizer.ggml.fim_suf_token_id": ids[1],
        "tokenizer.ggml.fim_mid_token_id": ids[2]})
    running = ServerProcess(tmp_path_factory.mktemp("coder-store"), work,
                            RUNNER_NUM_PARALLEL=1)
    running.create("coder", {"model.gguf": path})
    yield running, path, [tokens[i] for i in ids]
    assert running.stop() == 0


def test_a_suffix_is_filled_in_the_middle(coder):
    running, path, (pre, suf, mid) = coder
    shown = running.client.post("/api/show", json={"model": "coder"}).json()
    assert "insert" in shown["capabilities"]
    reply = running.client.post("/api/generate", json={
        "model": "coder", "prompt": "def add(a, b):", "suffix": "\n    return c",
        "stream": False, "options": {"num_predict": 3, "temperature": 0}})
    assert reply.status_code == 200, reply.text
    opened = open_model(path)
    try:
        expected = opened.tokenizer.encode(f"{pre}def add(a, b):{suf}\n    return c{mid}",
                                           add_special=True)
    finally:
        opened.close()
    assert reply.json()["prompt_eval_count"] == len(expected)
    raw = running.client.post("/api/generate", json={
        "model": "coder", "prompt": "x", "suffix": "y", "stream": False, "raw": True,
        "options": {"num_predict": 1}})
    assert raw.status_code == 200                          # raw with a suffix: FIM too
