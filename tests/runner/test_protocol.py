"""The runner protocol's requests, defined once (runner/protocol.py): what the server
writes (wire()) is what the runner reads back, field for field, whatever the keys' case;
what the protocol does not hold is refused by name."""

from __future__ import annotations

import pydantic
import pytest

from runner.protocol import (CompletionRequest, DetokenizeRequest, EmbeddingRequest, Image,
                             LoadRequest, TokenizeRequest)

REQUESTS = [
    CompletionRequest(prompt="[img-0] Hi", images=[Image(data="aGk=", id=0)],
                      options={"temperature": 0}, format={"type": "object"}, grammar="",
                      shift=False, truncate=False, logprobs=True, top_logprobs=3,
                      think_tags=["<think>", "</think>"], think_opened=True,
                      thinking_budget=512),
    CompletionRequest(prompt="Hi"),
    LoadRequest(operation=1, parallel=2, batch_size=256, flash_attention="auto",
                kv_size=4096, kv_cache_type="q8_0", num_threads=4, multiuser_cache=True,
                checkpoints=3),
    EmbeddingRequest(tokens=[1, 2, 3]), EmbeddingRequest(content="text"),
    TokenizeRequest(content="Hi", parse_special=False), DetokenizeRequest(tokens=[5, 6]),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_what_the_server_writes_the_runner_reads_back(request_):
    wire = request_.wire()
    assert type(request_).model_validate(wire) == request_
    lowered = {key.lower(): value for key, value in wire.items()}
    assert type(request_).model_validate(lowered) == request_


def test_the_wire_names_are_ollamas_and_absent_fields_stay_absent():
    wire = CompletionRequest(prompt="Hi").wire()
    assert wire["Prompt"] == "Hi" and "Images" not in wire and "Format" not in wire
    load = LoadRequest(operation=0).wire()
    assert load["Operation"] == 0 and "GPULayers" not in load   # the runner's own placement


def test_a_field_the_protocol_does_not_hold_is_refused_by_name():
    with pytest.raises(pydantic.ValidationError, match="Surprise"):
        CompletionRequest.model_validate({"Prompt": "Hi", "Surprise": 1})


def test_a_thinking_budget_is_a_count_within_think_tags():
    tags = {"Prompt": "Hi", "ThinkTags": ["<think>", "</think>"]}
    assert CompletionRequest.model_validate({**tags, "ThinkingBudget": 0}).thinking_budget == 0
    with pytest.raises(pydantic.ValidationError, match="greater than or equal to 0"):
        CompletionRequest.model_validate({**tags, "ThinkingBudget": -1})
    with pytest.raises(pydantic.ValidationError, match="needs the ThinkTags"):
        CompletionRequest.model_validate({"Prompt": "Hi", "ThinkingBudget": 8})
