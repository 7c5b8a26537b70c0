"""The request bodies of Ollama's API, one pydantic model each: what the routes read, what
/openapi.json publishes, and what is refused at the door, before any model is leased.

As in Ollama (a Go server), a field of the wrong type is refused, not converted, and unknown
fields are ignored. Options are the one exception: clients send them as a loose map, so
whole-valued floats are read as integers there (num_ctx 2048.0), as Ollama reads them.
OpenAI's bodies are in openai_bodies.py."""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated, Any, Literal

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator,
                      WithJsonSchema, field_validator, model_validator)

from ...engine.options import GenerateOptions
from ...sample import SamplingOptions
from ...tokenizer.messages import ROLES
from ..service.options import keep_alive_seconds, think_level


class Body(BaseModel):
    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="ignore",
                              populate_by_name=True)


def _whole(value):
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _think(value):
    think_level(value)                  # refuses what is neither a switch nor a level
    return value


def _seconds(value):
    return None if value is None else keep_alive_seconds(value)


Whole = Annotated[int, BeforeValidator(_whole)]
# seconds a model stays loaded: a number or a Go duration ("5m"), read as seconds (inf: for ever)
KeepAlive = Annotated[float | None, PlainValidator(_seconds),
                      WithJsonSchema({"oneOf": [{"type": "number"}, {"type": "string"}]})]
Think = Annotated[bool | Literal["low", "medium", "high", "max"] | None,
                  BeforeValidator(_think)]
Format = Literal["json", ""] | dict[str, Any] | None


class Options(Body):
    """Ollama's options. Unknown names are kept (and ignored, with a warning, when used)."""
    model_config = ConfigDict(extra="allow")
    num_predict: Whole | None = Field(None, ge=-2)
    num_keep: Whole | None = Field(None, ge=-1)
    temperature: float | None = None
    top_k: Whole | None = None
    top_p: float | None = None
    min_p: float | None = None
    seed: Whole | None = None
    repeat_last_n: Whole | None = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop: list[str] | None = None
    num_ctx: Whole | None = Field(None, ge=1)
    num_batch: Whole | None = Field(None, ge=1)
    num_gpu: Whole | None = Field(None, ge=-1)
    main_gpu: Whole | None = Field(None, ge=0)
    num_thread: Whole | None = Field(None, ge=0)
    use_mmap: bool | None = None
    # accepted and without effect here (samplers and switches this engine lacks)
    typical_p: float | None = None
    mirostat: Whole | None = None
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    tfs_z: float | None = None
    penalize_newline: bool | None = None
    low_vram: bool | None = None
    f16_kv: bool | None = None
    vocab_only: bool | None = None
    logits_all: bool | None = None
    numa: bool | None = None
    use_mlock: bool | None = None

    @model_validator(mode="after")
    def _in_range(self):
        """The sampler's own limits (repeat_penalty above 0, top_p in [0, 1], ...)."""
        given = self.given()
        for kind in (SamplingOptions, GenerateOptions):
            kind(**{f.name: given[f.name] for f in fields(kind) if f.name in given})
        return self

    def given(self) -> dict:
        """The options the client set, extra names included."""
        return self.model_dump(exclude_none=True)


class ToolFunction(Body):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(Body):
    """A tool the model may call (OpenAI's and Ollama's shape)."""
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: ToolFunction


class NamedFunction(Body):
    name: str


class NamedTool(Body):
    type: Literal["function"] = "function"
    function: NamedFunction


# OpenAI's tool_choice: "required" or a named function forces a call
ToolChoice = Literal["auto", "none", "required"] | NamedTool | None


class CallFunction(Body):
    index: int | None = None
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCall(Body):
    id: str | None = None
    function: CallFunction


class Message(Body):
    """A chat message as Ollama's chat takes it; other fields reach the template as given."""
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | None = ""
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role.lower() not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        return role.lower()

    def for_template(self) -> dict:
        """The message as templates read it: content a string, a tool result named."""
        message = self.model_dump(exclude_none=True)
        message["content"] = self.content or ""
        if self.tool_name and "name" not in message:
            message["name"] = self.tool_name
        if self.thinking and "reasoning_content" not in message:
            message["reasoning_content"] = self.thinking      # Hugging Face templates' name
        return message


class Loading(Body):
    """A request that leases a model: its name, options and how long it stays loaded."""
    model: str
    options: Options | None = None
    keep_alive: KeepAlive = None

    def given_options(self) -> dict:
        return self.options.given() if self.options else {}


class Generation(Loading):
    """What generate and chat share."""
    stream: bool = True
    format: Format = None
    think: Think = None
    truncate: bool = True
    shift: bool = True
    logprobs: bool = False
    top_logprobs: int = Field(0, ge=0, le=20)


class GenerateRequest(Generation):
    prompt: str = ""
    suffix: str = ""
    system: str | None = None
    template: str | None = None
    raw: bool = False
    context: list[Annotated[int, Field(ge=0)]] | None = None
    images: list[str] | None = None

    @model_validator(mode="after")
    def _raw_alone(self):
        if self.raw and (self.template or self.system or self.context):
            raise ValueError("raw mode does not support template, system, or context")
        return self


class ChatRequest(Generation):
    messages: list[Message] = Field(default_factory=list)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice = None

    @model_validator(mode="after")
    def _choice_names_a_tool(self):
        forcing = self.tool_choice == "required" or isinstance(self.tool_choice, NamedTool)
        if forcing and not self.tools:
            raise ValueError("tool_choice needs tools to choose from")
        if isinstance(self.tool_choice, NamedTool):
            names = {tool.function.name for tool in self.tools or []}
            if self.tool_choice.function.name not in names:
                raise ValueError(f"tool_choice names {self.tool_choice.function.name!r}, "
                                 "which is not among the tools")
        return self

    def tool_dicts(self) -> list[dict] | None:
        return [tool.model_dump(exclude_none=True) for tool in self.tools] if self.tools \
            else None


def _texts(value):
    if isinstance(value, str) or value is None:
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    raise ValueError("invalid input type: input must be a string or a list of strings")


Texts = Annotated[str | list[str] | None, BeforeValidator(_texts)]


class EmbedRequest(Loading):
    input: Texts = None
    truncate: bool = True
    dimensions: int | None = Field(None, ge=1)

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input or [])


class EmbeddingsRequest(Loading):
    """The legacy /api/embeddings: one prompt."""
    prompt: str = ""


class Named(Body):
    """Bodies that name a model, also by Ollama's older field `name`."""
    model: str = Field(min_length=1, max_length=1024)

    @model_validator(mode="before")
    @classmethod
    def _older_name(cls, data):
        if isinstance(data, dict) and data.get("model") is None and "name" in data:
            return {**data, "model": data["name"]}
        return data


class ModelRequest(Named):
    """show, pull and delete."""
    verbose: bool = False
    stream: bool = True
    insecure: bool = False


class CopyRequest(Body):
    source: str = Field(min_length=1, max_length=1024)
    destination: str = Field(min_length=1, max_length=1024)


class CreateRequest(Named):
    source: str | None = Field(None, alias="from")
    files: dict[str, str] = Field(default_factory=dict)
    template: str | None = None
    system: str | None = None
    parameters: Options | None = None
    quantize: str | None = None
    messages: list[Message] | None = None
    license: str | list[str] | None = None
    adapters: dict[str, str] = Field(default_factory=dict)      # refused: LoRA is not read
    stream: bool = True

    @model_validator(mode="after")
    def _has_a_source(self):
        if not self.files and not self.source:
            raise ValueError("neither 'from' nor 'files' was specified")
        return self
