"""gpt-oss through the server: a tiny converted gpt-oss with gpt-oss's own chat template
(the file as llama.cpp's converter writes it) and without any (as Ollama's files come,
rendered by the harmony renderer): both report tools and thinking, and a conversation with
tools, a call and its result, at each reasoning level, reaches the model as the same
prompt, the one the renderer writes (counted in tokens by the model's own tokenizer; each
request unloads the model after it, so that no cached prefix hides a token)."""

from __future__ import annotations

import json

import pytest

from runner.convert import convert
from runner.loading.loader import open_model
from runner.tokenizer import harmony

from tests.support.hf_tiny import checkpoint
from tests.support.official_templates import official_template
from tests.support.server import ServerProcess

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather now.",
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"city": {"type": "string", "description": "The city."}}}}}]
MESSAGES = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "thinking": "I need the tool.",
     "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "20 degrees and sunny"}]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    work = tmp_path_factory.mktemp("gpt-oss")
    long = dict(max_position_embeddings=4096)      # the conversations fit whole
    plain = convert(checkpoint("gpt_oss", work / "plain", **long), work / "plain.gguf", "f32",
                    progress=False)
    hf = checkpoint("gpt_oss", work / "official", **long)
    config = hf / "tokenizer_config.json"
    settings = json.loads(config.read_text())
    settings["chat_template"] = official_template("openai-gpt-oss-120b.jinja")
    config.write_text(json.dumps(settings))
    return {"plain": plain, "official": convert(hf, work / "official.gguf", "f32",
                                                progress=False)}


@pytest.fixture(scope="module")
def server(tmp_path_factory, files):
    running = ServerProcess(tmp_path_factory.mktemp("oss-store"),
                            tmp_path_factory.mktemp("oss-serve"), RUNNER_NUM_PARALLEL=1,
                            RUNNER_MAX_LOADED_MODELS=2)
    for name, path in files.items():
        running.create(f"oss-{name}", {"model.gguf": path})
    yield running
    assert running.stop() == 0


def tokens(path, text: str) -> int:
    opened = open_model(path)
    try:
        return len(opened.tokenizer.encode(text, add_special=True))
    finally:
        opened.close()


@pytest.mark.parametrize("name", ["plain", "official"])
def test_both_files_report_tools_and_thinking(server, name):
    shown = server.client.post("/api/show", json={"model": f"oss-{name}"}).json()
    assert {"completion", "tools", "thinking"} <= set(shown["capabilities"])


@pytest.mark.parametrize("think,effort", [(True, "medium"), ("low", "low"), ("high", "high"),
                                          ("max", "high"), (False, "low")])
def test_a_tool_conversation_reaches_the_model_as_harmony(server, files, think, effort):
    expected = tokens(files["plain"], harmony.render(MESSAGES, TOOLS, effort))
    for name in ("plain", "official"):
        reply = server.client.post("/api/chat", json={
            "model": f"oss-{name}", "messages": MESSAGES, "tools": TOOLS, "think": think,
            "stream": False, "options": {"num_predict": 4, "temperature": 0},
            "keep_alive": 0})                        # no cached prefix: every token counts
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["done"] and body["prompt_eval_count"] == expected, name
        if think is False:
            assert "thinking" not in body["message"]


def test_openai_reasoning_effort_and_tools(server, files):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model="oss-plain", messages=[MESSAGES[1]], tools=TOOLS, reasoning_effort="high",
        max_tokens=4, temperature=0)                 # the first request: nothing cached
    assert reply.usage.prompt_tokens == tokens(files["plain"],
                                               harmony.render([MESSAGES[1]], TOOLS, "high"))
