"""OpenAI's API through the official openai client."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import openai
import pytest

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city",
    "parameters": {"type": "object", "required": ["location"], "additionalProperties": False,
                   "properties": {"location": {"type": "string", "enum": ["Boston", "Paris"]}}}}}


def test_chat_completion_and_its_stream(openai_client):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    reply = openai_client.chat.completions.create(model="smollm2:135m", messages=messages,
                                                  max_tokens=10, temperature=0)
    choice = reply.choices[0]
    assert "Paris" in choice.message.content and choice.finish_reason in ("stop", "length")
    assert reply.usage.completion_tokens <= 10 and reply.usage.total_tokens > 10
    assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    chunks = list(openai_client.chat.completions.create(
        model="smollm2:135m", messages=messages, max_completion_tokens=10, temperature=0,
        stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1 and len({c.created for c in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and chunks[-1].choices == [] and chunks[-1].usage.completion_tokens


def test_completions_and_logprobs(openai_client):
    reply = openai_client.completions.create(model="smollm2:135m", prompt="The sky is",
                                             max_tokens=5, temperature=0)
    assert reply.object == "text_completion" and reply.choices[0].text
    chat = openai_client.chat.completions.create(
        model="smollm2:135m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
        temperature=0, logprobs=True, top_logprobs=2)
    entries = chat.choices[0].logprobs.content
    assert entries and all(len(e.top_logprobs) == 2 and e.logprob <= 0 for e in entries)


def test_json_schema_response_format_validates(openai_client):
    schema = {"type": "object", "required": ["answer"], "additionalProperties": False,
              "properties": {"answer": {"type": "string", "maxLength": 16}}}
    reply = openai_client.chat.completions.create(
        model="smollm2:135m", messages=[{"role": "user", "content": "Capital of France?"}],
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
        temperature=0)
    jsonschema.validate(json.loads(reply.choices[0].message.content), schema)
    reply = openai_client.chat.completions.create(
        model="smollm2:135m", messages=[{"role": "user", "content": "Capital of France?"}],
        response_format={"type": "json_object"}, temperature=0, max_tokens=200)
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


def test_a_required_tool_call_is_parsed_into_tool_calls(openai_client):
    messages = [{"role": "developer", "content": "Use the tools."},
                {"role": "user", "content": [{"type": "text", "text": "Weather in Boston?"}]}]
    reply = openai_client.chat.completions.create(
        model="tiny-qwen", messages=messages, tools=[WEATHER], tool_choice="required",
        reasoning_effort="none", temperature=0)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and len(call.id) == 13 and call.type == "function"
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])
    # the call goes back in the history with its result, as clients send it
    history = messages + [choice.message.model_dump(exclude_none=True),
                          {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 20C"}]
    streamed = list(openai_client.chat.completions.create(
        model="tiny-qwen", messages=history, tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        reasoning_effort="none", stream=True))
    deltas = [c.choices[0].delta for c in streamed if c.choices and c.choices[0].delta.tool_calls]
    assert len(deltas) == 1 and deltas[0].tool_calls[0].index == 0
    assert deltas[0].tool_calls[0].function.name == "get_weather"
    finish = [c.choices[0].finish_reason for c in streamed if c.choices and
              c.choices[0].finish_reason]
    assert finish == ["tool_calls"]
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert "<tool_call>" not in text


def test_embeddings_as_floats_and_as_base64(openai_client):
    floats = openai_client.embeddings.create(model="tiny-bert", input=["one", "two"],
                                             encoding_format="float")
    assert [d.index for d in floats.data] == [0, 1] and len(floats.data[0].embedding) == 64
    encoded = openai_client.embeddings.create(model="tiny-bert", input=["one", "two"])
    np.testing.assert_allclose(encoded.data[1].embedding, floats.data[1].embedding, rtol=1e-6)
    assert floats.usage.prompt_tokens > 0


def test_models_and_errors_in_openais_shape(openai_client):
    ids = [m.id for m in openai_client.models.list()]
    assert {"smollm2:135m", "gemma3:270m", "tiny-bert:latest"} <= set(ids)
    assert openai_client.models.retrieve("smollm2:135m").owned_by == "library"
    with pytest.raises(openai.NotFoundError) as missing:
        openai_client.chat.completions.create(model="nosuch",
                                              messages=[{"role": "user", "content": "x"}])
    assert missing.value.body["type"] == "not_found_error"
    with pytest.raises(openai.BadRequestError):
        openai_client.chat.completions.create(model="smollm2:135m", messages=[])
    with pytest.raises(openai.BadRequestError):
        openai_client.chat.completions.create(
            model="smollm2:135m", messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}])


def test_usage_counts_the_whole_prompt_and_says_what_was_cached(openai_client, server):
    """An identical request twice: the same prompt_tokens (Ollama and OpenAI count the whole
    prompt), the second with all but the last token cached."""
    messages = [{"role": "user", "content": "Count the cached tokens of this prompt, please."}]
    usages = [openai_client.chat.completions.create(
        model="smollm2:135m", messages=messages, max_tokens=1, temperature=0).usage
        for _ in range(2)]
    assert usages[0].prompt_tokens == usages[1].prompt_tokens > 10
    assert usages[1].prompt_tokens_details.cached_tokens == usages[1].prompt_tokens - 1
    native = server.client.post("/api/chat", json={
        "model": "smollm2:135m", "messages": messages, "stream": False,
        "options": {"num_predict": 1, "temperature": 0}}).json()
    assert native["prompt_eval_count"] == usages[0].prompt_tokens


def test_embeddings_of_token_ids_equal_those_of_their_text(openai_client, tiny_models):
    from runner.loading.loader import open_model

    opened = open_model(tiny_models["bert"])
    try:
        ids = [opened.tokenizer.encode(text, add_special=True) for text in ("one two", "three")]
    finally:
        opened.close()
    texts = openai_client.embeddings.create(model="tiny-bert", input=["one two", "three"],
                                            encoding_format="float")
    tokens = openai_client.embeddings.create(model="tiny-bert", input=ids,
                                             encoding_format="float")
    single = openai_client.embeddings.create(model="tiny-bert", input=ids[0],
                                             encoding_format="float")
    for theirs, ours in zip(texts.data, tokens.data):
        np.testing.assert_array_equal(theirs.embedding, ours.embedding)
    np.testing.assert_array_equal(single.data[0].embedding, texts.data[0].embedding)
    assert tokens.usage.prompt_tokens == sum(map(len, ids))


@pytest.mark.parametrize("given", ["", [], [""], ["a", ""], [[]], [[1, 2], []], [10 ** 9],
                                   [1, "a"]])
def test_empty_or_bad_embedding_input_is_refused(openai_client, given):
    with pytest.raises(openai.BadRequestError):
        openai_client.embeddings.create(model="tiny-bert", input=given)
