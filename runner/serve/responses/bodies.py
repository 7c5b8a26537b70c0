"""The request body of OpenAI's Responses API (/v1/responses) and its translation into a
native chat request: instructions, input as text or items (messages with text and image
parts, function calls and their outputs, reasoning), function tools, tool_choice,
reasoning.effort, text.format, max_output_tokens. Items of kinds this server has no use for
(web search calls, file search...) are refused by name."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from ..ollama.bodies import (Body, CallFunction, ChatRequest, Message, NamedFunction, NamedTool,
                             Options, Tool, ToolCall)
from ..openai.bodies import DATA_URLS_ONLY, EFFORT, Effort, image_data
from ..service.options import effort_budget


class InputText(Body):
    type: Literal["input_text", "output_text", "text", "summary_text", "reasoning_text"]
    text: str
    model_config = ConfigDict(extra="allow")           # annotations, logprobs


class InputImage(Body):
    type: Literal["input_image"]
    image_url: str | None = None
    detail: str | None = None
    file_id: str | None = None


class Refusal(Body):
    type: Literal["refusal"]
    refusal: str


Part = Annotated[InputText | InputImage | Refusal, Field(discriminator="type")]


class MessageItem(Body):
    model_config = ConfigDict(extra="allow")           # id, status
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Part]


class FunctionCallItem(Body):
    model_config = ConfigDict(extra="allow")
    type: Literal["function_call", "custom_tool_call"]
    call_id: str
    name: str
    arguments: str = "{}"
    input: str | None = None                   # a custom tool's: its free-form input

    @model_validator(mode="after")
    def _custom_input(self):
        """A custom tool's call as the function tools offer it: {"input": text}."""
        if self.type == "custom_tool_call":
            self.arguments = json.dumps({"input": self.input or ""})
        return self


class FunctionOutputItem(Body):
    model_config = ConfigDict(extra="allow")
    type: Literal["function_call_output", "custom_tool_call_output"]
    call_id: str
    output: str | list[InputText]


class WebSearchItem(Body):
    """A hosted search a client replays: nothing here ran it, and the model does not see it
    (as Ollama)."""
    model_config = ConfigDict(extra="allow")
    type: Literal["web_search_call"]


class ReasoningItem(Body):
    model_config = ConfigDict(extra="allow")           # id, encrypted_content
    type: Literal["reasoning"]
    summary: list[InputText] = Field(default_factory=list)
    content: list[InputText] | None = None


Item = Annotated[FunctionCallItem | FunctionOutputItem | ReasoningItem | WebSearchItem,
                 Field(discriminator="type")]


class FunctionTool(Body):
    model_config = ConfigDict(extra="allow")           # strict
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    free_form: bool | None = None       # a custom tool's: its calls are custom_tool_call items


# hosted search tools (run by OpenAI's servers): offered to the model as a function of this
# shape, whose calls the client sees (Ollama runs it against ollama.com; this server cannot)
WEB_SEARCH = {"description": "Search the web.", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
# hosted tools with nothing a model could call here (Ollama passes them on nameless)
HOSTED = ("local_shell", "file_search", "mcp", "image_generation", "computer_use_preview",
          "code_interpreter")


def function_tools(tools: list, prefix: str = "") -> list[dict]:
    """Tools as function tools: a namespace's members (Codex's groups) under their
    namespace's name and a dot, as Ollama names them; web search as a function; a custom
    tool (free-form input) as a function of one string; hosted tools left out."""
    found = []
    for tool in tools:
        if not isinstance(tool, dict):
            raise ValueError("each tool must be an object")
        kind, name = tool.get("type", "function"), tool.get("name")
        if kind == "namespace":
            if not name or not isinstance(tool.get("tools"), list):
                raise ValueError("a namespace tool needs a name and a list of tools")
            found += function_tools(tool["tools"], prefix + name + ".")
        elif kind == "function":
            found.append(dict(tool, name=_prefixed(prefix, name)))
        elif kind.startswith("web_search"):
            found.append(dict(WEB_SEARCH, type="function", name=_prefixed(prefix, "web_search")))
        elif kind == "custom":
            found.append({"type": "function", "name": _prefixed(prefix, name),
                          "description": tool.get("description"), "free_form": True,
                          "parameters": {"type": "object", "required": ["input"],
                                         "properties": {"input": {"type": "string"}}}})
        elif kind not in HOSTED:
            raise ValueError(f"tools of type {kind!r} are not supported; this server takes "
                             "function, namespace, custom and web_search tools")
    return found


def _prefixed(prefix: str, name):
    return name if not prefix or not isinstance(name, str) or name.startswith(prefix) \
        else prefix + name


class NamedChoice(Body):
    type: Literal["function", "custom"]
    name: str


class TextFormat(Body):
    model_config = ConfigDict(extra="allow")           # name, description, strict
    type: Literal["text", "json_object", "json_schema"]
    schema_: dict[str, Any] | None = Field(None, alias="schema")


class TextConfig(Body):
    model_config = ConfigDict(extra="allow")           # verbosity
    format: TextFormat | None = None


class ReasoningConfig(Body):
    model_config = ConfigDict(extra="allow")           # summary, generate_summary
    effort: Effort | None = None


class ResponsesRequest(Body):
    model_config = ConfigDict(extra="allow")   # store, metadata, user, include, truncation...
    model: str
    input: str | list[MessageItem | Item] = Field(min_length=1)
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedChoice | None = None

    @field_validator("tools", mode="before")
    @classmethod
    def _as_functions(cls, tools):
        return function_tools(tools) if isinstance(tools, list) else tools
    reasoning: ReasoningConfig | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    stream: bool = False
    previous_response_id: str | None = None
    parallel_tool_calls: bool = True

    @model_validator(mode="after")
    def _stateless(self):
        if self.previous_response_id is not None:
            raise ValueError("previous_response_id is not supported: this server keeps no "
                             "responses; send the whole conversation in input")
        return self

    def thinking_budget(self) -> int | None:
        """reasoning.effort as a thinking budget (EFFORT_BUDGETS; None: no bound)."""
        return effort_budget(self.reasoning.effort if self.reasoning else None)

    def native(self) -> ChatRequest:
        tools = [Tool.model_validate({"function": {
            "name": t.name, "description": t.description, "parameters": t.parameters}})
            for t in self.tools or []]
        given_choice = self.tool_choice
        choice = NamedTool(function=NamedFunction(name=given_choice.name)) \
            if isinstance(given_choice, NamedChoice) else given_choice
        given = {"temperature": 1.0 if self.temperature is None else self.temperature,
                 "top_p": 1.0 if self.top_p is None else self.top_p,
                 "num_predict": self.max_output_tokens}
        effort = self.reasoning.effort if self.reasoning else None
        return ChatRequest(model=self.model, messages=self.messages(), stream=False,
                           options=Options.model_validate(
                               {k: v for k, v in given.items() if v is not None}),
                           tools=tools or None, tool_choice=choice if tools else None,
                           think=None if effort is None else EFFORT[effort],
                           format=self._format(), truncate=False)

    def _format(self):
        form = self.text.format if self.text else None
        if form is None or form.type == "text":
            return None
        if form.type == "json_object":
            return "json"
        if form.schema_ is None:
            raise ValueError("text.format json_schema needs a schema")
        return form.schema_

    def messages(self) -> list[Message]:
        found = [Message(role="system", content=self.instructions)] if self.instructions \
            else []
        items = [MessageItem(role="user", content=self.input)] if isinstance(self.input, str) \
            else self.input
        names, thinking = {}, []              # call id -> function name; reasoning to attach
        for item in items:
            if isinstance(item, WebSearchItem):
                continue
            if isinstance(item, ReasoningItem):
                thinking += [p.text for p in (item.content or item.summary)]
            elif isinstance(item, FunctionCallItem):
                names[item.call_id] = item.name
                last = found[-1] if found and found[-1].role == "assistant" else None
                if last is None:
                    last = Message(role="assistant", content="")
                    found.append(last)
                last.tool_calls = (last.tool_calls or []) + [ToolCall(
                    id=item.call_id, function=CallFunction(name=item.name,
                                                           arguments=_arguments(item)))]
            elif isinstance(item, FunctionOutputItem):
                output = item.output if isinstance(item.output, str) else \
                    "".join(part.text for part in item.output)
                found.append(Message(role="tool", content=output,
                                     tool_name=names.get(item.call_id, ""),
                                     tool_call_id=item.call_id))
            else:
                found.append(_message(item))
            if thinking and found and found[-1].role == "assistant":
                found[-1].thinking, thinking = "".join(thinking), []
        return found


def _arguments(item: FunctionCallItem) -> dict:
    try:
        arguments = json.loads(item.arguments or "{}")
    except json.JSONDecodeError:
        raise ValueError(f"invalid function call arguments: {item.arguments!r}") from None
    if not isinstance(arguments, dict):
        raise ValueError(f"function call arguments must be a JSON object, not "
                         f"{item.arguments!r}")
    return arguments


def _message(item: MessageItem) -> Message:
    role = "system" if item.role == "developer" else item.role
    if isinstance(item.content, str):
        return Message(role=role, content=item.content)
    texts, images = [], []
    for part in item.content:
        if isinstance(part, InputImage):
            data = image_data(part.image_url)
            if data is None:
                raise ValueError(DATA_URLS_ONLY)
            images.append(data)
        else:
            texts.append(part.refusal if isinstance(part, Refusal) else part.text)
    return Message(role=role, content="".join(texts), images=images or None)
