"""Qwen 3.5 through the server, as `ollama run qwen3.5` uses it: a tiny random Qwen 3.5
converted here with the family's own chat template (llama.cpp's copy of Qwen3.5-4B's). `show`
reports tools and thinking; thinking is on unless a request turns it off, as the template
says; a conversation's every turn reuses the one before through the recurrent states'
checkpoints, and says so in OpenAI's usage (cached_tokens)."""

from __future__ import annotations

import pytest

from runner.convert import convert

from tests.support.official_templates import official_template
from tests.support.server import ServerProcess, templated_checkpoint

NAME = "tiny-qwen35"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("qwen35")
    hf = templated_checkpoint("qwen3_5", work / "hf", official_template("Qwen3.5-4B.jinja"),
                              max_position_embeddings=4096)
    running = ServerProcess.exact(tmp_path_factory, NAME,
                                  {"model.gguf": convert(hf, work / "model.gguf", "f32",
                                                         progress=False)})
    yield running
    running.stop()


def test_show_reports_tools_and_thinking(server):
    shown = server.client.post("/api/show", json={"model": NAME}).json()
    assert {"completion", "tools", "thinking"} <= set(shown["capabilities"])
    assert "vision" not in shown["capabilities"]
    assert shown["model_info"]["general.architecture"] == "qwen35"


def chat(server, messages, **body) -> dict:
    reply = server.client.post("/api/chat", json={
        "model": NAME, "messages": messages, "stream": False,
        "options": {"temperature": 0, "num_predict": 6}, **body})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_thinking_is_on_unless_turned_off(server):
    question = [{"role": "user", "content": "Why is the sky blue?"}]
    # a random model never closes its thought: all it writes is thinking
    thought = chat(server, question)["message"]
    assert thought.get("thinking") and not thought["content"]
    plain = chat(server, question, think=False)["message"]
    assert not plain.get("thinking") and plain["content"]


def test_every_turn_reuses_the_conversation_before_it(server):
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="unused")
    messages, previous = [], None
    for turn in range(6):
        messages.append({"role": "user", "content": f"Tell me fact number {turn} about cats."})
        reply = client.chat.completions.create(model=NAME, messages=messages, max_tokens=5,
                                               temperature=0)
        usage = reply.usage
        cached = usage.prompt_tokens_details.cached_tokens
        if previous is None:
            assert cached == 0
        else:
            # all of the turn before but its generation prompt's "<think>\n", which this
            # turn's template rewrote (past replies lose their thinking)
            assert previous - 2 <= cached < usage.prompt_tokens
        previous = usage.prompt_tokens
        messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
