"""Ollama's parser names: each maps to a registered reply format (or plain text), so that a
pulled model whose config names a parser reads its replies, and every name Ollama's
model/parsers/parsers.go registers is in the table."""

from __future__ import annotations

from runner.serve.formats import FORMATS
from runner.serve.formats.parsers import PARSERS, format_of_parser

# ParserForName's names in github.com/ollama/ollama model/parsers/parsers.go at
# fb30760996871fa9460115c753afd2c60d4ab0f7
OLLAMAS = {"qwen3", "qwen3-thinking", "qwen3.5", "ornith", "qwen3-coder", "qwen3-vl-instruct",
           "qwen3-vl-thinking", "ministral", "passthrough", "harmony", "cogito", "deepseek3",
           "olmo3", "olmo3-think", "nemotron-3-nano", "nemotron-3.5-nano", "functiongemma",
           "glm-4.7", "gemma4", "gemma4-no-thinking", "glm-ocr", "lfm2", "lfm2-thinking",
           "laguna", "poolside-v1", "cohere", "glimmer"}


def test_every_parser_name_is_in_the_table():
    assert set(PARSERS) == OLLAMAS


def test_each_names_a_registered_format():
    names = {f.name for f in FORMATS}
    assert {p.format for p in PARSERS.values() if p.format} <= names
    assert format_of_parser("qwen3.5").name == "qwen3coder"
    assert format_of_parser("olmo3") is None and format_of_parser("unknown") is None
