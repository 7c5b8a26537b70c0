"""The request bodies of OpenAI's API (chat completions, completions, embeddings), one pydantic
model each, refused at the door like Ollama's (bodies.py). Fields OpenAI defines that this
server does not use (user, service_tier, ...) are ignored."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field

from ..ollama.bodies import Body, Tool, ToolChoice

EFFORT: dict[str, Any] = {"none": False, "minimal": "low", "low": "low", "medium": "medium",
                          "high": "high", "max": "max", "xhigh": "max", "ultra": "max"}
# a Literal of EFFORT's keys (built from them at run time; a string to the type checker)
if TYPE_CHECKING:
    Effort = str
else:
    Effort = Literal[tuple(EFFORT)]
Stop = str | list[str] | None


def _some_prompt(value):
    if value == [] or (isinstance(value, list) and any(item == [] for item in value)):
        raise ValueError("prompt cannot be an empty array")
    return value


class StreamOptions(Body):
    include_usage: bool = False


DATA_URLS_ONLY = "only data:image/...;base64 image URLs are supported"


def image_data(url: str | None) -> str | None:
    """The base64 data of a data:image URL (None for any other URL: nothing is fetched)."""
    return url.split(",", 1)[-1] if url and url.startswith("data:image/") else None


class TextPart(Body):
    type: Literal["text"]
    text: str


class ImageURL(Body):
    url: str
    detail: str | None = None


class ImagePart(Body):
    type: Literal["image_url"]
    image_url: ImageURL


class AudioData(Body):
    data: str
    format: str | None = None


class AudioPart(Body):
    type: Literal["input_audio"]
    input_audio: AudioData


Part = Annotated[TextPart | ImagePart | AudioPart, Field(discriminator="type")]


class OpenAIFunctionCall(Body):
    name: str
    arguments: str | dict[str, Any] = "{}"


class OpenAIToolCall(Body):
    id: str | None = None
    type: Literal["function"] = "function"
    function: OpenAIFunctionCall


class OpenAIMessage(Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[Part] | None = None
    name: str | None = None
    tool_calls: list[OpenAIToolCall] | None = None
    tool_call_id: str | None = None
    reasoning: str | None = None


class JSONSchema(Body):
    model_config = ConfigDict(extra="allow")
    name: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchema | None = None


class Reasoning(Body):
    effort: Effort | None = None


class Sampling(Body):
    """The sampling fields both completions take."""
    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    seed: int | None = None
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    stop: Stop = None
    logit_bias: dict[str, float] | None = None

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatCompletionRequest(Sampling):
    messages: list[OpenAIMessage] = Field(min_length=1)
    n: int = Field(1, ge=1, le=16)
    max_completion_tokens: int | None = Field(None, ge=0)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice = None
    reasoning_effort: Effort | None = None
    reasoning: Reasoning | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)


class CompletionRequest(Sampling):
    prompt: Annotated[str | list[str] | list[int] | list[list[int]],
                      BeforeValidator(_some_prompt)]
    suffix: str | None = None
    logprobs: int | None = Field(None, ge=0, le=20)
    echo: bool = False
    n: int = Field(1, ge=1, le=16)

    def prompts(self) -> list:
        """Each prompt: a text or a list of token ids."""
        if isinstance(self.prompt, str) or (self.prompt and isinstance(self.prompt[0], int)):
            return [self.prompt]
        return list(self.prompt)


def _some_input(value):
    """OpenAI's rule: no empty string, no empty list, no empty token array."""
    items = value if isinstance(value, list) else [value]
    if not items or any(item == "" or item == [] for item in items):
        raise ValueError("input cannot be empty: send a non-empty string, array of strings "
                         "or array of token ids")
    return value


class OpenAIEmbeddingsRequest(Body):
    model: str
    input: Annotated[str | list[str] | list[int] | list[list[int]],
                     BeforeValidator(_some_input)]
    dimensions: int | None = Field(None, ge=1)
    encoding_format: Literal["float", "base64"] = "float"

    def inputs(self) -> list:
        """Each input: a text or a list of token ids."""
        if isinstance(self.input, str) or (self.input and isinstance(self.input[0], int)):
            return [self.input]
        return list(self.input)
