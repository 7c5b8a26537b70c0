"""The Modelfile /api/show writes, for what a pulled model's manifest may hold: params of
any JSON, messages lacking a role or content, or with content that is not text."""

from __future__ import annotations

from pathlib import Path

from runner.serve.library.entry import Entry
from runner.serve.ollama.modelfile import modelfile


def pulled(**fields) -> Entry:
    return Entry("pulled:latest", Path("/models/pulled.gguf"), "0" * 64, _metadata={},
                 **fields)


def test_a_pulled_models_messages_and_params_write_whatever_they_hold():
    entry = pulled(parameters={"stop": ["</s>", None], "options": {"a": 1}, "seed": 42},
                   messages=[{"role": "user", "content": "Hi"}, {"role": "assistant"},
                             {"content": ["part"]}, {"role": "user", "content": None}])
    lines = modelfile(entry).splitlines()
    assert 'PARAMETER stop </s>' in lines and "PARAMETER stop null" in lines
    assert 'PARAMETER options {"a": 1}' in lines and "PARAMETER seed 42" in lines
    assert lines[-4:] == ["MESSAGE user Hi", "MESSAGE assistant ", 'MESSAGE  ["part"]',
                          "MESSAGE user null"]


def test_values_are_quoted_as_ollama_quotes_them():
    entry = pulled(system=" Be brief.", license='one\n"two"', go_template="{{ .Prompt }}")
    text = modelfile(entry)
    assert "TEMPLATE {{ .Prompt }}\n" in text and 'SYSTEM " Be brief."\n' in text
    assert 'LICENSE """one\n"two""""\n' in text
