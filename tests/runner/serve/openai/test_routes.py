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
    assert {"smollm2:135m", "gemma3:270m-base", "tiny-bert:latest"} <= set(ids)
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


def test_a_prompt_longer_than_the_context_is_refused_as_openai_refuses_it(openai_client,
                                                                          server):
    long = [{"role": "user", "content": "word " * 5000}]        # the context holds 4096
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client.chat.completions.create(model="smollm2:135m", messages=long,
                                              max_tokens=1)
    assert raised.value.code == "context_length_exceeded"
    assert "truncation is off" in raised.value.message
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client.completions.create(model="smollm2:135m", prompt="word " * 5000,
                                         max_tokens=1)
    assert raised.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as raised:
        openai_client.embeddings.create(model="tiny-bert", input="word " * 600)
    assert raised.value.code == "context_length_exceeded"
    # Ollama's own chat keeps its meaning: the prompt is cut to fit
    reply = server.client.post("/api/chat", json={
        "model": "smollm2:135m", "messages": [{"role": "user", "content": "word " * 600}],
        "stream": False, "options": {"num_ctx": 256, "num_predict": 1}})
    assert reply.status_code == 200 and reply.json()["prompt_eval_count"] <= 256


PROMPT = "The capital of France is"


def test_completions_continue_the_prompt_as_raw_text(openai_client, server):
    """OpenAI's completions continue the text itself (no chat template): as Ollama's raw
    generate does; prompt arrays, n and echo as OpenAI gives them."""
    raw = server.client.post("/api/generate", json={
        "model": "smollm2:135m", "prompt": PROMPT, "raw": True, "stream": False,
        "options": {"num_predict": 6, "temperature": 0}}).json()["response"]
    reply = openai_client.completions.create(model="smollm2:135m", prompt=PROMPT,
                                             max_tokens=6, temperature=0)
    assert reply.choices[0].text == raw and "Paris" in raw
    several = openai_client.completions.create(model="smollm2:135m", prompt=[PROMPT, "1, 2,"],
                                               max_tokens=6, temperature=0, n=2)
    assert [c.index for c in several.choices] == [0, 1, 2, 3]
    assert several.choices[0].text == several.choices[1].text == raw
    assert several.choices[2].text.strip().startswith("3")
    assert several.usage.completion_tokens <= 24
    echoed = openai_client.completions.create(model="smollm2:135m", prompt=PROMPT,
                                              max_tokens=6, temperature=0, echo=True)
    assert echoed.choices[0].text == PROMPT + raw
    with pytest.raises(openai.BadRequestError):
        openai_client.completions.create(model="smollm2:135m", prompt=PROMPT, max_tokens=2,
                                         echo=True, logprobs=1)


def test_token_id_prompts_continue_as_their_text(openai_client, model_paths):
    from runner.loading.loader import open_model

    opened = open_model(model_paths["smollm2"])
    try:
        ids = opened.tokenizer.encode(PROMPT, add_special=False)
    finally:
        opened.close()
    text = openai_client.completions.create(model="smollm2:135m", prompt=PROMPT, max_tokens=6,
                                            temperature=0).choices[0].text
    tokens = openai_client.completions.create(model="smollm2:135m", prompt=ids, max_tokens=6,
                                              temperature=0)
    assert tokens.choices[0].text == text
    both = openai_client.completions.create(model="smollm2:135m", prompt=[ids, ids],
                                            max_tokens=6, temperature=0)
    assert [c.text for c in both.choices] == [text, text]


def test_legacy_logprobs_have_tokens_offsets_and_tops(openai_client):
    reply = openai_client.completions.create(model="smollm2:135m", prompt=PROMPT,
                                             max_tokens=6, temperature=0, logprobs=3)
    choice = reply.choices[0]
    logprobs = choice.logprobs
    assert "".join(logprobs.tokens) == choice.text
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs)
    assert all(p <= 0 for p in logprobs.token_logprobs)
    assert all(len(top) <= 3 and max(top.values()) >= chosen - 1e-6
               for top, chosen in zip(logprobs.top_logprobs, logprobs.token_logprobs))
    assert logprobs.text_offset == [sum(map(len, logprobs.tokens[:i]))
                                    for i in range(len(logprobs.tokens))]
    streamed = list(openai_client.completions.create(
        model="smollm2:135m", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3,
        stream=True))
    tokens = [t for c in streamed if c.choices and c.choices[0].logprobs
              for t in c.choices[0].logprobs.tokens]
    assert tokens == logprobs.tokens


def test_n_choices_whole_and_streamed(openai_client):
    messages = [{"role": "user", "content": "Say hi."}]
    reply = openai_client.chat.completions.create(model="smollm2:135m", messages=messages,
                                                  max_tokens=4, temperature=0, n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert len({c.message.content for c in reply.choices}) == 1          # greedy: the same
    chunks = list(openai_client.chat.completions.create(
        model="smollm2:135m", messages=messages, max_tokens=4, temperature=0, n=2,
        stream=True, stream_options={"include_usage": True}))
    finishes = {c.choices[0].index: c.choices[0].finish_reason for c in chunks
                if c.choices and c.choices[0].finish_reason}
    assert finishes == {0: "length", 1: "length"}
    texts = {i: "".join(c.choices[0].delta.content or "" for c in chunks
                        if c.choices and c.choices[0].index == i) for i in (0, 1)}
    assert texts[0] == texts[1] == reply.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 8


def test_logit_bias_moves_the_choice(openai_client, model_paths):
    from runner.loading.loader import open_model

    opened = open_model(model_paths["smollm2"])
    try:
        paris = opened.tokenizer.encode(" Paris", add_special=False)
        word = opened.tokenizer.encode(" banana", add_special=False)
    finally:
        opened.close()
    assert len(paris) == 1 and len(word) == 1
    plain = openai_client.completions.create(model="smollm2:135m", prompt=PROMPT, max_tokens=1,
                                             temperature=0).choices[0].text
    assert plain == " Paris"
    banned = openai_client.completions.create(model="smollm2:135m", prompt=PROMPT,
                                              max_tokens=1, temperature=0,
                                              logit_bias={str(paris[0]): -100})
    assert banned.choices[0].text != " Paris"
    forced = openai_client.chat.completions.create(
        model="smollm2:135m", messages=[{"role": "user", "content": "Hi"}], max_tokens=3,
        temperature=0, logit_bias={str(word[0]): 100})
    assert forced.choices[0].message.content == " banana" * 3
    with pytest.raises(openai.BadRequestError):
        openai_client.completions.create(model="smollm2:135m", prompt=PROMPT, max_tokens=1,
                                         logit_bias={"99999999": 5})
    with pytest.raises(openai.BadRequestError):
        openai_client.completions.create(model="smollm2:135m", prompt=PROMPT, max_tokens=1,
                                         logit_bias={"5": 500})


def test_the_openai_routes_answer_without_v1_too(server):
    """llama-server and vLLM answer /chat/completions, /completions and /embeddings too;
    clients given a base URL without /v1 call them so."""
    import openai as sdk

    bare = sdk.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    reply = bare.chat.completions.create(model="smollm2:135m", max_tokens=2,
                                         messages=[{"role": "user", "content": "Hi"}])
    assert reply.choices[0].message.content
    assert bare.completions.create(model="smollm2:135m", prompt="Hi", max_tokens=2).choices
    assert len(bare.embeddings.create(model="tiny-bert", input="hi").data[0].embedding) == 64
    with pytest.raises(sdk.NotFoundError) as missing:
        bare.chat.completions.create(model="no-such", messages=[{"role": "user",
                                                                 "content": "Hi"}])
    assert missing.value.body["type"] == "not_found_error"
