"""The runner protocol's requests (docs/runner.md), defined once: the server builds them
(serve/service/runners.py) and the runner process validates them (process/app.py).

Field names on the wire follow the protocol (Ollama's server sends "Prompt", "Options",
...): wire() writes them; like Go's JSON decoder, a runner reads keys regardless of case.
Unknown keys are refused with their names."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _any_case(cls, data):
        if not isinstance(data, dict):
            return data
        names = {}
        for name, field in cls.model_fields.items():
            names[name.lower()] = field.alias or name
            names[(field.alias or name).lower()] = field.alias or name
        return {names.get(key.lower(), key) if isinstance(key, str) else key: value
                for key, value in data.items()}

    def wire(self) -> dict:
        """The body as the protocol writes it (absent fields left out)."""
        return self.model_dump(by_alias=True, exclude_none=True)


class Image(Body):
    data: str = Field(alias="data")
    id: int = Field(0, alias="id")


class CompletionRequest(Body):
    prompt: str = Field(alias="Prompt")
    images: list[Image] | None = Field(None, alias="Images")
    options: dict[str, Any] | None = Field(None, alias="Options")
    format: Any = Field(None, alias="Format")
    grammar: str = Field("", alias="Grammar")
    shift: bool | None = Field(None, alias="Shift")
    truncate: bool = Field(True, alias="Truncate")
    logprobs: bool = Field(False, alias="Logprobs")
    top_logprobs: int = Field(0, alias="TopLogprobs", ge=0, le=20)
    # our extensions. The reply's thinking is between these tags (open, close): a grammar
    # holds the answer after them, a budget bounds them; ThinkOpened: the prompt opened it
    think_tags: list[str] | None = Field(None, alias="ThinkTags", min_length=2, max_length=2)
    think_opened: bool = Field(False, alias="ThinkOpened")
    # at most this many tokens of thinking, then the close tag is forced (sample/budget.py)
    thinking_budget: int | None = Field(None, alias="ThinkingBudget", ge=0)

    @model_validator(mode="after")
    def _budget_has_tags(self):
        if self.thinking_budget is not None and not self.think_tags:
            raise ValueError("ThinkingBudget needs the ThinkTags that bound the thinking")
        return self


class EmbeddingRequest(Body):
    content: str = Field("", alias="content")
    tokens: list[int] | None = Field(None, alias="tokens")     # ids to embed as they are


class TokenizeRequest(Body):
    content: str = Field(alias="content")
    add_special: bool = Field(False, alias="add_special")
    parse_special: bool = Field(True, alias="parse_special")


class DetokenizeRequest(Body):
    tokens: list[int] = Field(alias="tokens")


class DeviceLayers(Body):
    id: str = Field(alias="id")
    backend: str = Field("", alias="backend")
    layers: list[int] = Field(default_factory=list, alias="Layers")


class LoadRequest(Body):
    operation: int = Field(alias="Operation", ge=0, le=3)
    parallel: int = Field(1, alias="Parallel", ge=1, le=63)
    batch_size: int = Field(512, alias="BatchSize", ge=1, le=8192)
    flash_attention: bool | str | None = Field(None, alias="FlashAttention")
    kv_size: int = Field(4096, alias="KvSize", ge=1)
    kv_cache_type: str = Field("", alias="KvCacheType")
    num_threads: int | None = Field(None, alias="NumThreads", ge=1)
    # absent: the runner's own placement (--num-gpu, ...); present (even empty): these layers
    # on these devices, the rest on the CPU
    gpu_layers: list[DeviceLayers] | None = Field(None, alias="GPULayers")
    multiuser_cache: bool = Field(False, alias="MultiUserCache")
    # a hybrid model's recurrent-state checkpoints per sequence (absent: the runner's own)
    checkpoints: int | None = Field(None, alias="Checkpoints", ge=0, le=64)


OPERATIONS = {0: "fit", 1: "alloc", 2: "commit", 3: "close"}
