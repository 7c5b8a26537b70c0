"""muse's glimmer format (muse-glimmer's template; Ollama's "glimmer" parser): a reply is
messages, each a header naming its recipient, <|message|>, a body, and <|eom|> (the message
ends) or <|eot|> (the turn ends):

    to=self<|message|>let me look<|eom|><|start|>assistant to=get_weather<|message|>
    <atem:function_calls><atem:invoke name="get_weather"><atem:parameter
    name="location">Paris</atem:parameter></atem:invoke></atem:function_calls><|eom|>

A body to "self" is thinking, to "user" content (streamed as it comes), any other
recipient's (a tool's name, "muse", none) holds calls in muse's <atem:invoke> syntax, read
once the body ends: content where it holds none, or a tool not declared. As Ollama's parser,
a body to "user" that is nothing but such calls of declared tools is those calls (a
recipient the model fumbled), so one that starts like them is held until it ends. The
prompt ends with <|start|>assistant, so a reply starts at its first header; a later message
may open with it again or not."""

from __future__ import annotations

import dataclasses
from typing import Any

from .calls import call_id, typed
from .extractor import held
from .format import EXTRACTORS, Format, TextCall, register
from .invoke import invoke_format

START, MESSAGE, END_MESSAGE, END_TURN = "<|start|>assistant", "<|message|>", "<|eom|>", "<|eot|>"
ENDS = (END_MESSAGE, END_TURN, START)
INVOKE, CALLS, CALLS_END = "<atem:invoke", "<atem:function_calls>", "</atem:function_calls>"


class GlimmerExtractor:
    def __init__(self, fmt: Format, tools: bool | list = False, thinking: bool = True,
                 start_thinking: bool = False):
        self.format, self.tools, self.thinking = fmt, bool(tools), thinking
        self.schemas = {t.get("function", t).get("name"): t.get("function", t).get("parameters")
                        for t in tools} if isinstance(tools, list) else {}
        self.buffer, self.index = "", 0
        self.recipient: str | None = None       # the message's, once its header is whole
        self.held_body = ""                     # a calls' body, read once it ends
        self.streamed = False                   # some of the message went out as content

    def push(self, text: str, done: bool = False) -> tuple[str, str, list[dict]]:
        self.buffer += text
        content: list[str] = []
        thinking: list[str] = []
        calls: list[dict] = []
        while (self._body(done, content, thinking, calls) if self.recipient is not None
               else self._header(done, content)):
            pass
        return "".join(content), "".join(thinking) if self.thinking else "", calls

    def finish(self) -> tuple[str, str, list[dict]]:
        return self.push("", done=True)

    def _header(self, done: bool, content: list) -> bool:
        """Take a message's header; False when there is none whole yet."""
        text = self.buffer.lstrip()
        if text.startswith(START):
            text = text[len(START):]
        elif START.startswith(text) and text and not done:
            return False
        at = text.find(MESSAGE)
        if at < 0:
            if done:                              # text outside any message: content
                content.append(self.buffer)
                self.buffer = ""
            return False
        self.recipient = text[:at].strip().removeprefix("to=").strip()
        self.buffer, self.held_body, self.streamed = text[at + len(MESSAGE):], "", False
        return True

    def _body(self, done: bool, content: list, thinking: list, calls: list) -> bool:
        """Take what a message's body has of itself; True when it ended."""
        hits = [(self.buffer.find(tag), tag) for tag in ENDS if tag in self.buffer]
        if hits:
            at, tag = min(hits)
            piece, rest = self.buffer[:at], self.buffer[at + (0 if tag == START else len(tag)):]
        elif done:
            piece, rest = self.buffer, ""
        else:
            keep = held(self.buffer, ENDS)
            piece, self.buffer = self.buffer[:len(self.buffer) - keep], \
                self.buffer[len(self.buffer) - keep:]
            self._take(piece, content, thinking)
            return False
        self.buffer = rest
        self._take(piece, content, thinking)
        if self.recipient != "self" and (self.held_body or self.recipient != "user"):
            self._calls(self.held_body, content, calls, whole=self.recipient == "user")
        self.recipient = None
        return True

    def _take(self, piece: str, content: list, thinking: list) -> None:
        if self.recipient == "self":
            thinking.append(piece)
        elif self.recipient == "user" and not self.held_body and (self.streamed or not (
                self.tools and (_may_open(piece.lstrip()) or not piece.strip()))):
            self.streamed = self.streamed or bool(piece)
            content.append(piece)
        else:
            self.held_body += piece

    def _calls(self, body: str, content: list, calls: list, whole: bool) -> None:
        """The calls body holds (whole: and nothing else), or body as content."""
        parse = self.format.parse_call
        found = [parse(part) for part in body.split(INVOKE)[1:]] if self.tools else []
        text = body.strip()
        if not found or None in found or (whole and not (
                text.startswith(CALLS) and text.endswith(CALLS_END))) or \
                (self.schemas and any(p[0] not in self.schemas for p in found if p)):
            content.append(body)
            return
        for parsed in found:
            assert parsed is not None and not isinstance(parsed, list)      # checked above
            name, arguments = parsed[0], parsed[1]
            call: dict[str, Any] = {"id": call_id(), "function": {
                "index": self.index, "name": name,
                "arguments": typed(arguments, self.schemas.get(name))}}
            calls.append(call)
            self.index += 1


def _may_open(text: str) -> bool:
    """Whether text could be the start of a calls' body."""
    return text.startswith(CALLS) or CALLS.startswith(text) and bool(text)


EXTRACTORS["glimmer"] = GlimmerExtractor

GLIMMER = register(dataclasses.replace(
    invoke_format("glimmer", lambda t: "<atem:function_calls>" in t, "atem:",
                  ("atem:function_calls",), think=None),
    extractor="glimmer", special_tags=(MESSAGE, END_MESSAGE),
    text_call=TextCall(' to={name}<|message|><atem:function_calls>\n<atem:invoke name="{name}">\n',
                       '<atem:parameter name="{parameter}">', "</atem:parameter>\n",
                       "</atem:invoke>\n</atem:function_calls><|eom|>")), rank=20)
