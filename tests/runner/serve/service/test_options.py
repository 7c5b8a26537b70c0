"""Option layering, keep_alive durations, think levels, the server's address."""

from __future__ import annotations

import math

import pytest

from runner.serve.service.options import (LoadChoice, Settings, address, keep_alive_seconds,
                                          layered, load_choice, think_level)


@pytest.mark.parametrize("value, seconds", [
    (0, 0.0), (30, 30.0), (1.5, 1.5), (-1, math.inf), ("0", 0.0), ("5m", 300.0),
    ("1h30m", 5400.0), ("1.5h", 5400.0), ("250ms", 0.25), ("-1m", math.inf), ("10s", 10.0)])
def test_keep_alive_as_ollama_reads_it(value, seconds):
    assert keep_alive_seconds(value) == seconds


@pytest.mark.parametrize("value", ["-1", "5", "five minutes", "5x", True, [1], float("nan")])
def test_keep_alive_refuses_what_ollama_refuses(value):
    with pytest.raises(ValueError):
        keep_alive_seconds(value)


def test_options_layer_defaults_model_and_request_and_ignore_unknown_names(caplog):
    generation, load, merged = layered({"temperature": 0.1, "num_ctx": 1024},
                                       {"top_k": 5, "mirostat": 2, "bogus": 1, "seed": None})
    assert generation["temperature"] == 0.1 and generation["top_k"] == 5
    assert generation["top_p"] == 0.9 and generation["seed"] == -1
    assert load == {"num_ctx": 1024} and "mirostat" not in generation
    assert "bogus" in caplog.text and "mirostat" not in caplog.text
    with pytest.raises(ValueError, match='"num_ctx" must be of type integer'):
        layered({}, {"num_ctx": "big"})
    choice = load_choice(load, Settings(), context_length=512)
    assert choice == LoadChoice(num_ctx=512)                       # capped at the model's


def test_think_levels():
    assert [think_level(v) for v in (None, True, False, "high")] == [None, "medium", "off",
                                                                    "high"]
    with pytest.raises(ValueError, match="think must be"):
        think_level("loud")


def test_the_servers_address():
    assert address(None) == ("127.0.0.1", 11434) and address(":8080") == ("127.0.0.1", 8080)
    assert address("0.0.0.0") == ("0.0.0.0", 11434)
    assert address("http://example:9000/") == ("example", 9000)
    with pytest.raises(ValueError):
        address("host:port")
