"""Model names parsed as Ollama parses them (types/model/name.go)."""

from __future__ import annotations

import pytest

from runner.registry.names import ModelName


@pytest.mark.parametrize("text,parts,display", [
    ("mistral", ("registry.ollama.ai", "library", "mistral", "latest", "https"),
     "mistral:latest"),
    ("qwen3:8b", ("registry.ollama.ai", "library", "qwen3", "8b", "https"), "qwen3:8b"),
    ("user/model:q4_K_M", ("registry.ollama.ai", "user", "model", "q4_K_M", "https"),
     "user/model:q4_K_M"),
    ("registry.ollama.ai/library/llama3.2:3b",
     ("registry.ollama.ai", "library", "llama3.2", "3b", "https"), "llama3.2:3b"),
    ("localhost:5000/team/model", ("localhost:5000", "team", "model", "latest", "https"),
     "localhost:5000/team/model:latest"),
    ("http://127.0.0.1:8080/ns/m:v1", ("127.0.0.1:8080", "ns", "m", "v1", "http"),
     "127.0.0.1:8080/ns/m:v1"),
    ("hf.co/unsloth/Qwen3-8B-GGUF:Q4_K_M", ("hf.co", "unsloth", "Qwen3-8B-GGUF", "Q4_K_M",
                                           "https"), "hf.co/unsloth/Qwen3-8B-GGUF:Q4_K_M"),
])
def test_names_parse_as_ollamas(text, parts, display):
    name = ModelName.parse(text)
    assert (name.host, name.namespace, name.model, name.tag, name.scheme) == parts
    assert name.display == display
    assert ModelName.parse(name.display) == ModelName(*parts[:4])   # the display round trips


@pytest.mark.parametrize("text,problem", [
    ("", "model must be 1 to 80"),
    ("-model", "must start with"),
    ("name space/model", "may not hold ' '"),
    ("my.team/model", "namespace 'my.team' may not hold '.'"),
    ("a/b/c/d", "4 parts"),
    ("model:" + "t" * 81, "tag must be 1 to 80"),
    ("ftp://host/ns/model", "scheme 'ftp'"),
])
def test_bad_names_say_what_is_wrong(text, problem):
    with pytest.raises(ValueError, match="is not a model name|scheme") as error:
        ModelName.parse(text)
    assert problem in str(error.value)


def test_hugging_face_hosts():
    assert ModelName.parse("hf.co/u/r").on_hugging_face
    assert ModelName.parse("huggingface.co/u/r:Q8_0").on_hugging_face
    assert not ModelName.parse("u/r").on_hugging_face
