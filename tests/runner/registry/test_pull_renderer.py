"""A model Ollama's library ships with a renderer and a parser named in its config blob, and
a GGUF without a chat template (Gemma 3's tiny file here): pulled from the loopback registry,
the names are in the store's manifest, the model reports tools and thinking (what Ollama's
parser supports), and its prompts come from the named renderer, its replies read in the
parser's format."""

from __future__ import annotations

import dataclasses

import pytest

from runner.registry.pull import pull
from runner.serve.formats.prompts import chat_prompt, generate_prompt
from runner.serve.library.store import Library
from runner.serve.ollama.modelfile import modelfile
from runner.tokenizer.renderers import RENDERERS, render_named

from tests.support.registry_server import RegistryServer, Served, with_config

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get weather",
    "parameters": {"type": "object", "required": ["location"],
                   "properties": {"location": {"type": "string"}}}}}]


@pytest.fixture()
def registry(model_paths, tmp_path):
    served = Served()
    for name, renderer, parser in (("library/coder:1b", "qwen3.5", "qwen3.5"),
                                   ("library/glm:1b", "glm-4.7", "glm-4.7"),
                                   ("library/later:1b", "some-future-renderer", "cohere")):
        served.add_model(name, [("model", model_paths["gemma3"])])
        with_config(served, name, tmp_path / f"{name.split('/')[1]}.json", {
            "model_format": "gguf", "model_family": "gemma3", "renderer": renderer,
            "parser": parser, "architecture": "amd64", "os": "linux"})
    served.add_model("library/plain:1b", [("model", model_paths["gemma3"])])
    with_config(served, "library/plain:1b", tmp_path / "plain.json", {"model_format": "gguf"})
    server = RegistryServer(served)
    yield server
    server.close()


def pulled(registry, library, model: str):
    return pull(f"http://{registry.host}/library/{model}", library, insecure=True)


def test_the_config_names_are_kept_and_the_model_has_tools_and_thinking(registry, tmp_path):
    library = Library(tmp_path / "store")
    entry = pulled(registry, library, "coder:1b")
    assert entry.metadata.get("tokenizer.chat_template") is None
    assert (entry.renderer, entry.parser) == ("qwen3.5", "qwen3.5")
    again = library.get(entry.name)                       # read back from the store
    assert (again.renderer, again.parser) == ("qwen3.5", "qwen3.5")
    assert {"tools", "thinking"} <= set(again.capabilities())
    assert "RENDERER qwen3.5\nPARSER qwen3.5\n" in modelfile(again)
    library.copy(entry.name, "mine")
    assert library.get("mine").renderer == "qwen3.5"
    plain = pulled(registry, library, "plain:1b")
    assert (plain.renderer, plain.parser) == (None, None)
    assert "tools" not in plain.capabilities() and "thinking" not in plain.capabilities()


def test_prompts_come_from_the_named_renderer(registry, tmp_path):
    library = Library(tmp_path / "store")
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    for model, name, format_name in (("coder:1b", "qwen3.5", "qwen3coder"),
                                     ("glm:1b", "glm-4.7", "glm")):
        entry = pulled(registry, library, model)
        prompt = chat_prompt(entry, messages, TOOLS, "medium")
        assert prompt.text == render_named(name, messages, TOOLS, "medium")
        assert prompt.format.name == format_name and prompt.start_thinking
        off = chat_prompt(entry, messages, None, "off")
        assert off.text == render_named(name, messages, None, False) and not off.start_thinking
        assert generate_prompt(entry, "Hi", None, None, raw=False) == \
            render_named(name, [{"role": "user", "content": "Hi"}])


def test_a_renderer_not_rendered_here_falls_back_and_says_so(registry, tmp_path, caplog):
    entry = pulled(registry, Library(tmp_path / "store"), "later:1b")
    assert entry.named_renderer() is None
    assert {"tools", "thinking"} <= set(entry.capabilities())      # the parser's
    prompt = chat_prompt(entry, [{"role": "user", "content": "Hi"}], None, "medium")
    assert prompt.text.startswith("<start_of_turn>user\nHi")     # Gemma's turns, the family's
    assert 'renderer "some-future-renderer", which this server does not render' in caplog.text


def test_gemma4_is_the_small_or_the_large_renderer_by_name_then_size(registry, tmp_path):
    entry = dataclasses.replace(pulled(registry, Library(tmp_path / "store"), "coder:1b"),
                                renderer="gemma4")
    for name, variant in (("gemma4:e4b", "gemma4-small"), ("gemma4:31b", "gemma4-large"),
                          ("mine:latest", "gemma4-small")):        # the tiny file: small
        assert dataclasses.replace(entry, name=name).named_renderer() is RENDERERS[variant]
