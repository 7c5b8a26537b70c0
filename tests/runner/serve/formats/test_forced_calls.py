"""A forced call in each family's own syntax, through all four APIs: a tiny model given the
family's chat template (llama.cpp's copy, from the pinned archive) and tool_choice answers
with one call of the tool, which comes back as a call with arguments valid for the schema,
from Ollama's native API (tool_choice is this server's extension there: Ollama's has none),
OpenAI's chat completions and Responses (the official openai client) and Anthropic's
Messages (the official anthropic client).

The families are those of the architectures this project runs (Qwen 3, Qwen3-Coder and Qwen
3.5, Mistral, Llama 3, Gemma 4 with its own object syntax, gpt-oss's harmony, LFM2's Python
calls) and some whose
call syntax is their own (GLM, MiniMax-M2 whose prompts open a think block, MiniMax-M3,
DeepSeek V3.2, Kimi K2 and K3, Solar Open, muse's glimmer)."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import pytest

from runner.serve.formats import format_for

from tests.support.official_templates import official_template

pytestmark = pytest.mark.server

FAMILIES = ["Qwen-Qwen3-0.6B.jinja", "Qwen3-Coder.jinja", "Qwen3.5-4B.jinja",
            "Mistral-Small-3.2-24B-Instruct-2506.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
            "google-gemma-4-31B-it.jinja", "openai-gpt-oss-120b.jinja", "LFM2.5-8B-A1B.jinja",
            "GLM-4.6.jinja", "MiniMax-M2.jinja", "MiniMax-M3.jinja",
            "deepseek-ai-DeepSeek-V3.2.jinja", "moonshotai-Kimi-K2.jinja", "Kimi-K3.jinja",
            "upstage-Solar-Open-100B.jinja", "muse-glimmer.jinja"]
# values from enums: a random model's free text could outrun the tokens it is given
PARAMETERS = {"type": "object", "required": ["location", "days"], "additionalProperties": False,
              "properties": {"location": {"type": "string", "enum": ["Paris", "Rome"]},
                             "days": {"type": "integer", "enum": [1, 2]}}}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                         "parameters": PARAMETERS}}
QUESTION = "Weather in Paris for 2 days?"
SYSTEM = "Use the tools."


@pytest.fixture(scope="module")
def family_models(server):
    """template name -> a tiny Qwen model with that template."""
    made = {}
    for name in FAMILIES:
        model = "forced-" + name.removesuffix(".jinja").lower().replace(".", "-")
        created = server.client.post("/api/create", json={
            "model": model, "from": "tiny-qwen", "template": official_template(name),
            "stream": False})
        assert created.status_code == 200, created.text
        made[name] = model
    yield made
    for model in made.values():
        server.client.request("DELETE", "/api/delete", json={"model": model})


def check(name: str, arguments) -> None:
    assert name == "get_weather"
    jsonschema.validate(arguments, PARAMETERS)


@pytest.mark.parametrize("template", FAMILIES)
def test_a_forced_call_comes_back_through_every_api(server, openai_client, family_models,
                                                    template):
    model = family_models[template]
    fmt = format_for(official_template(template))
    assert fmt.call_text or fmt.text_call or fmt.call_grammar, f"{fmt.name} cannot force"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]

    native = server.client.post("/api/chat", json={
        "model": model, "messages": messages, "tools": [TOOL], "tool_choice": "required",
        "think": False, "stream": False,
        "options": {"temperature": 0, "num_predict": 300}}).json()
    (call,) = native["message"]["tool_calls"]
    check(call["function"]["name"], call["function"]["arguments"])

    chat = openai_client.chat.completions.create(
        model=model, messages=messages, tools=[TOOL], tool_choice="required", temperature=0,
        max_tokens=300, reasoning_effort="none")
    (call,) = chat.choices[0].message.tool_calls
    check(call.function.name, json.loads(call.function.arguments))
    assert chat.choices[0].finish_reason == "tool_calls"

    response = openai_client.responses.create(
        model=model, instructions=SYSTEM, input=QUESTION, temperature=0,
        tools=[{"type": "function", "name": "get_weather", "parameters": PARAMETERS}],
        tool_choice="required", reasoning={"effort": "none"}, max_output_tokens=300)
    (item,) = [item for item in response.output if item.type == "function_call"]
    check(item.name, json.loads(item.arguments))

    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
    message = client.messages.create(
        model=model, max_tokens=300, system=SYSTEM,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[{"name": "get_weather", "description": "Weather.", "input_schema": PARAMETERS}],
        tool_choice={"type": "any"}, thinking={"type": "disabled"},
        extra_body={"temperature": 0})
    (block,) = [b for b in message.content if b.type == "tool_use"]
    check(block.name, block.input)
    assert message.stop_reason == "tool_use"
