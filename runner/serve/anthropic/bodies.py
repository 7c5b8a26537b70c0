"""The request bodies of Anthropic's Messages API (/v1/messages and its count_tokens), one
pydantic model each, refused at the door as the others are (bodies.py), and their
translation into a native chat request: system text (and system messages among the turns,
as Claude Code sends them), messages of text, image, document, tool_use, tool_result and
thinking blocks, tools with input schemas (a server tool, e.g. web_search_20250305, as a
function of its name), tool_choice, thinking. Fields this server does not use
(cache_control, metadata, container, mcp_servers, ...) are accepted and ignored, as
Ollama ignores them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from ..ollama.bodies import Body, ChatRequest, Message, NamedFunction, NamedTool, Options, Tool
from ..service.options import effort_budget


class TextBlock(Body):
    model_config = ConfigDict(extra="allow")       # cache_control, citations: not used
    type: Literal["text"]
    text: str


class ImageSource(Body):
    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class ImageBlock(Body):
    model_config = ConfigDict(extra="allow")
    type: Literal["image"]
    source: ImageSource


class ToolUseBlock(Body):
    model_config = ConfigDict(extra="allow")
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(Body):
    model_config = ConfigDict(extra="allow")
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock] = ""
    is_error: bool = False


class ThinkingBlock(Body):
    model_config = ConfigDict(extra="allow")
    type: Literal["thinking", "redacted_thinking"]
    thinking: str = ""
    signature: str | None = None


class DocumentSource(Body):
    model_config = ConfigDict(extra="allow")
    type: str                                      # text, base64 (PDF), url, content
    data: str | None = None
    media_type: str | None = None


class DocumentBlock(Body):
    """A document: a plain-text one is read as text; others (PDFs, URLs) are left out, as
    Ollama leaves every document out."""
    model_config = ConfigDict(extra="allow")       # title, context, citations
    type: Literal["document"]
    source: DocumentSource

    @property
    def text(self) -> str:
        return self.source.data or "" if self.source.type == "text" else ""


# blocks of Anthropic's server-side tools (and other hosted features) that a client sends
# back in its history: nothing here ran them, and nothing of theirs reaches the model
SERVER_BLOCKS = ("server_tool_use", "web_search_tool_result", "web_fetch_tool_result",
                 "code_execution_tool_result", "bash_code_execution_tool_result",
                 "text_editor_code_execution_tool_result", "mcp_tool_use", "mcp_tool_result",
                 "container_upload", "search_result", "tool_search_tool_result")


# Literals built from the tuples at run time (strings to the type checker)
if TYPE_CHECKING:
    ServerKind = str
else:
    ServerKind = Literal[SERVER_BLOCKS]


class ServerBlock(Body):
    model_config = ConfigDict(extra="allow")
    type: ServerKind


Block = Annotated[TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock |
                  DocumentBlock | ServerBlock, Field(discriminator="type")]


class AnthropicMessage(Body):
    # Claude Code sends "system" messages among the others, as Ollama accepts
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class AnthropicTool(Body):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class AnthropicToolChoice(Body):
    model_config = ConfigDict(extra="allow")       # disable_parallel_tool_use: not used
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None


class Thinking(Body):
    model_config = ConfigDict(extra="allow")       # display: not used
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: int | None = Field(None, ge=0)


class OutputFormat(Body):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "max", "max": "max"}
if TYPE_CHECKING:
    EffortKind = str
else:
    EffortKind = Literal[tuple(EFFORTS)]


class OutputConfig(Body):
    effort: EffortKind | None = None
    format: OutputFormat | None = None


class CountTokensRequest(Body):
    model_config = ConfigDict(extra="allow")       # metadata, service_tier...: not used
    model: str
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None

    @model_validator(mode="after")
    def _choice_names_a_tool(self):
        choice = self.tool_choice
        if choice is not None and choice.type == "tool":
            names = {tool.name for tool in self.tools or []}
            if choice.name not in names:
                raise ValueError(f"tool_choice names {choice.name!r}, which is not among the "
                                 "tools")
        return self

    def native(self, options: Options | None = None, stream: bool = False) -> ChatRequest:
        """The same request as Ollama's chat."""
        tools = [Tool.model_validate({"function": {
            "name": t.name, "description": t.description, "parameters": t.input_schema}})
            for t in self.tools or []]
        output = self.output_config or OutputConfig()
        return ChatRequest(model=self.model, messages=self._messages(), options=options,
                           stream=stream, tools=tools or None, tool_choice=self._choice(),
                           think=self._think(), format=output.format.schema_
                           if output.format else None, truncate=False)

    def thinking_budget(self) -> int | None:
        """The thinking tokens allowed: thinking's budget_tokens where it is enabled, else
        the budget of output_config's effort (EFFORT_BUDGETS); None: no bound."""
        thinking = self.thinking
        if thinking is not None and thinking.type == "disabled":
            return None
        if thinking is not None and thinking.budget_tokens is not None:
            return thinking.budget_tokens
        return effort_budget(self.output_config.effort if self.output_config else None)

    def _think(self):
        """Thinking off, on, or at the effort output_config asks (Ollama's levels)."""
        effort = self.output_config.effort if self.output_config else None
        if self.thinking is not None and self.thinking.type == "disabled":
            return False
        if effort is not None:
            return EFFORTS[effort]
        return None if self.thinking is None else True

    def _choice(self):
        choice = self.tool_choice
        if choice is None or not self.tools:
            return None
        if choice.type == "tool":
            return NamedTool(function=NamedFunction(name=choice.name))
        return {"auto": "auto", "any": "required", "none": "none"}[choice.type]

    def _messages(self) -> list[Message]:
        """The system text first (system, then each system message's, as Ollama's templates
        gather them: many chat templates refuse a system message after the first), then the
        turns."""
        systems = [self.system] if isinstance(self.system, str) else \
            [block.text for block in self.system or []]
        found: list[Message] = []
        names: dict[str, str] = {}                 # tool_use id -> tool name
        for message in self.messages:
            blocks = [TextBlock(type="text", text=message.content)] \
                if isinstance(message.content, str) else message.content
            if message.role == "system":
                systems.append("".join(block.text for block in blocks
                                       if isinstance(block, TextBlock)))
            elif message.role == "assistant":
                found.append(_assistant(blocks, names))
            else:
                found += _user(blocks, names)
        system = "\n\n".join(text for text in systems if text)
        return ([Message(role="system", content=system)] if system else []) + found


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)

    def options(self) -> Options:
        given = {"num_predict": self.max_tokens, "temperature": self.temperature,
                 "top_p": self.top_p, "top_k": self.top_k, "stop": self.stop_sequences}
        return Options.model_validate({k: v for k, v in given.items() if v is not None})


def _assistant(blocks: list, names: dict) -> Message:
    """One native assistant message: its text, thinking and tool calls."""
    texts, thoughts, calls = [], [], []
    for block in blocks:
        if isinstance(block, ServerBlock):
            continue
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ThinkingBlock):
            thoughts.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            names[block.id] = block.name
            calls.append({"id": block.id, "function": {"name": block.name,
                                                       "arguments": block.input}})
        else:
            raise ValueError(f"An assistant message cannot hold a {block.type} block.")
    return Message.model_validate({"role": "assistant", "content": "".join(texts),
                                   "thinking": "".join(thoughts) or None,
                                   "tool_calls": calls or None})


def _user(blocks: list, names: dict) -> list[Message]:
    """Native messages for a user turn: tool results become tool messages (in order), the
    text and images one user message."""
    found, texts, images = [], [], []
    for block in blocks:
        if isinstance(block, ServerBlock):
            continue
        if isinstance(block, (TextBlock, DocumentBlock)):
            texts.append(block.text)
        elif isinstance(block, ImageBlock):
            images.append(_image(block))
        elif isinstance(block, ToolResultBlock):
            parts = [block.content] if isinstance(block.content, str) else block.content
            content = "".join(p if isinstance(p, str) else p.text for p in parts
                              if isinstance(p, (str, TextBlock)))
            pictures = [_image(p) for p in parts if isinstance(p, ImageBlock)]
            found.append(Message(role="tool", content=("Error: " if block.is_error else "") +
                                 content, tool_name=names.get(block.tool_use_id, ""),
                                 tool_call_id=block.tool_use_id, images=pictures or None))
        else:
            raise ValueError(f"A user message cannot hold a {block.type} block.")
    if texts or images:
        found.append(Message(role="user", content="".join(texts), images=images or None))
    return found


def _image(block: ImageBlock) -> str:
    if block.source.type != "base64" or not block.source.data:
        raise ValueError("Images must be sent as base64 data (source type base64); this "
                         "server fetches no URLs.")
    return block.source.data


def tool_input(arguments) -> dict:
    """A call's arguments as a tool_use block's input (an object)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return {}
    return arguments if isinstance(arguments, dict) else {}
