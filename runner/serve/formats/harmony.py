"""OpenAI's harmony format (gpt-oss), taken apart as the reply streams.

A reply is messages, each a header, <|message|>, a body and an end:

    <|channel|>analysis<|message|>thinking...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json
    <|message|>{"city": "Paris"}<|call|>
    <|start|>assistant<|channel|>final<|message|>the answer<|return|>

The analysis channel is thinking; final is content; commentary addressed to a tool
(to=functions.NAME, the recipient before or after the channel) is a tool call whose body is
its JSON arguments, commentary to no one (a preamble) is content. <|call|> and <|return|>
end the reply, <|end|> one message. Malformed replies still come out: a body that never
ends is flushed as its channel's text, a call whose arguments do not parse (or that names
no recipient) is content, text outside any header is content. A tag split across pieces is
held back until it is whole.
"""

from __future__ import annotations

import json
import re

from .calls import call_id
from .extractor import held
from .format import EXTRACTORS, Format, register

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
END, CALL, RETURN, CONSTRAIN = "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"
ENDS = (END, CALL, RETURN)
HEADER_STARTS = (START, CHANNEL, "assistant", "to=", CONSTRAIN)   # after leading spaces
RECIPIENT = re.compile(r"to=([^\s<]+)")
CHANNEL_NAME = re.compile(re.escape(CHANNEL) + r"\s*(\w+)")


class HarmonyExtractor:
    HEADER, BODY, DONE = range(3)

    def __init__(self, fmt: Format, tools: bool = False, thinking: bool = True,
                 start_thinking: bool = False):
        self.format, self.tools, self.thinking = fmt, tools, thinking
        self.state, self.buffer = self.HEADER, ""
        self.channel, self.arguments = "final", ""
        self.recipient: str | None = None
        self.index = 0

    def push(self, text: str, done: bool = False) -> tuple[str, str, list[dict]]:
        """(content, thinking, tool calls) that text completes; done flushes the rest."""
        self.buffer += text
        content: list[str] = []
        thinking: list[str] = []
        calls: list[dict] = []
        while self.buffer and self.state != self.DONE:
            before = (self.state, len(self.buffer))
            (self._header if self.state == self.HEADER else self._body)(
                done, content, thinking, calls)
            if (self.state, len(self.buffer)) == before:
                break
        if done:
            self._close(content, calls)
        return "".join(content), "".join(thinking) if self.thinking else "", calls

    def finish(self) -> tuple[str, str, list[dict]]:
        return self.push("", done=True)

    def _header(self, done, content, thinking, calls) -> None:
        stripped = self.buffer.lstrip()
        if not stripped:
            self.buffer = "" if done else self.buffer
            return
        if not any(stripped.startswith(s) or s.startswith(stripped) for s in HEADER_STARTS):
            self.channel, self.recipient, self.state = "final", None, self.BODY  # no header
            return
        if MESSAGE not in self.buffer:
            if done:                                  # a header with no message: nothing
                self.buffer = ""
            return
        header, _, self.buffer = self.buffer.partition(MESSAGE)
        channel = CHANNEL_NAME.search(header)
        recipient = RECIPIENT.search(header)
        self.channel = channel.group(1) if channel else "final"
        self.recipient = recipient.group(1) if recipient else None
        self.arguments, self.state = "", self.BODY

    def _body(self, done, content, thinking, calls) -> None:
        tags = (*ENDS, START, CHANNEL)         # a new header without <|end|>: malformed
        hits = [(self.buffer.find(tag), tag) for tag in tags if tag in self.buffer]
        where, tag = min(hits) if hits else (len(self.buffer), None)
        if tag is None and not done:
            where -= held(self.buffer, tags)
        self._emit(self.buffer[:where], content, thinking)
        self.buffer = self.buffer[where:]
        if tag is None:
            return
        self._close(content, calls)
        if tag in (CALL, RETURN):
            self.state, self.buffer = self.DONE, ""
            return
        self.buffer = self.buffer[len(tag):] if tag == END else self.buffer
        self.state = self.HEADER

    def _emit(self, text: str, content, thinking) -> None:
        if self._calling():
            self.arguments += text
        elif self.channel == "analysis":
            thinking.append(text)
        else:
            content.append(text)

    def _calling(self) -> bool:
        return self.tools and self.recipient is not None and self.channel != "analysis"

    def _close(self, content, calls) -> None:
        """The message ends: a tool call's arguments are parsed (content if they do not)."""
        if self._calling():
            try:
                arguments = json.loads(self.arguments or "{}")
            except json.JSONDecodeError:
                arguments = None
            if isinstance(arguments, dict) and self.recipient is not None:
                name = self.recipient.removeprefix("functions.")
                calls.append({"id": call_id(), "function": {
                    "index": self.index, "name": name, "arguments": arguments}})
                self.index += 1
            else:
                content.append(self.arguments)
        self.arguments, self.recipient = "", None


EXTRACTORS["harmony"] = HarmonyExtractor

HARMONY = register(Format(
    "harmony", lambda t: "<|channel|>" in t and "<|message|>" in t, extractor="harmony",
    answer_after=("<|channel|>", "<|channel|>final<|message|>"),
    special_tags=(CHANNEL, MESSAGE, CONSTRAIN, CALL),
    call_text=lambda name, args: f"{CHANNEL}commentary to=functions.{name} {CONSTRAIN}json"
                                 f"{MESSAGE}{args}{CALL}"), rank=10)
