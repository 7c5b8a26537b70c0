"""A catalog name means what it means in Ollama's library: smollm2:135m offers tools (Open
WebUI adds its tools to every chat) with a template that renders a chat without tools word
for word as the file's own template does, and whose calls parse back."""

from __future__ import annotations

import pytest

from runner.loading import store
from runner.serve.library.catalog import catalog_entry
from runner.serve.library.entry import Entry
from runner.serve.formats import Extractor, format_for
from runner.serve.formats.prompts import chat_prompt

from tests.support.streaming import run

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city.",
    "parameters": {"type": "object", "required": ["location"],
                   "properties": {"location": {"type": "string"}}}}}
CHATS = [[{"role": "user", "content": "Hi"}],
         [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Why?"}]]


@pytest.fixture(scope="module")
def smollm2(model_paths):
    return catalog_entry("smollm2:135m", model_paths["smollm2"],
                         store.CATALOG["smollm2:135m"].sha256)


@pytest.mark.parametrize("messages", CHATS)
def test_a_chat_without_tools_renders_as_the_files_own_template(smollm2, messages):
    own = Entry(smollm2.name, smollm2.path, smollm2.digest)        # the file's template
    assert own.chat_template == smollm2.metadata["tokenizer.chat_template"]
    assert chat_prompt(smollm2, messages, None, None).text == \
        chat_prompt(own, messages, None, None).text


def test_with_tools_the_calls_render_and_parse_back(smollm2):
    messages = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": {"location": "Paris"}}},
                    {"function": {"name": "get_weather", "arguments": {"location": "Rome"}}}]},
                {"role": "tool", "content": "Sunny"}, {"role": "tool", "content": "Rain"}]
    prompt = chat_prompt(smollm2, messages, [WEATHER], None)
    assert '"name": "get_weather"' in prompt.text.split("<tools>")[1].split("</tools>")[0]
    assert "<tool_response>\nSunny\n</tool_response>" in prompt.text
    written = prompt.text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    _, _, calls = run(Extractor(format_for(smollm2.chat_template), tools=[WEATHER]), [written])
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == \
        [("get_weather", {"location": "Paris"}), ("get_weather", {"location": "Rome"})]


def test_the_server_offers_tools_with_smollm2(server):
    shown = server.client.post("/api/show", json={"model": "smollm2:135m"}).json()
    assert shown["capabilities"] == ["completion", "tools"]
    assert "You are a helpful AI assistant named SmolLM" in shown["system"]
    reply = server.client.post("/api/chat", json={
        "model": "smollm2:135m", "messages": [{"role": "user", "content": "Hi"}],
        "tools": [WEATHER], "stream": False, "options": {"num_predict": 8}})
    assert reply.status_code == 200, reply.text
