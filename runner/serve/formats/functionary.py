"""MeetKai's functionary: v3.1 writes calls as <function=NAME>{json}</function> in Llama 3's
turns; v3.2 writes every part of a reply after ">>>" and its recipient's name on a line of
its own: ">>>all\\n" before text for the user, ">>>NAME\\n{json}" for a call of NAME. Its
prompt ends with the first ">>>", so a reply starts with a recipient."""

from __future__ import annotations

from typing import Any

from .calls import call_id, closed_json, named_call
from .extractor import held
from .format import EXTRACTORS, Format, register

SEPARATOR, TO_USER = ">>>", "all"


def function_tag_call(body: str) -> tuple | None:
    """v3.1's NAME>{json} (after <function=)."""
    name, closed, arguments = body.partition(">")
    return named_call(name, arguments) if closed else None


class RecipientExtractor:
    """Follows a v3.2 reply as it streams: text to "all" is content as it comes, a call's
    JSON is read once the next ">>>" (or the end) closes it; a call cut by the length limit
    is closed where it stopped and marked cut; one whose JSON does not parse is content."""

    def __init__(self, fmt: Format, tools: bool | list = False, thinking: bool = True,
                 start_thinking: bool = False):
        self.tools, self.buffer, self.index = bool(tools), "", 0
        self.recipient: str | None = None

    def push(self, text: str, done: bool = False) -> tuple[str, str, list[dict]]:
        self.buffer += text
        content: list[str] = []
        calls: list[dict] = []
        while self.buffer or (done and self.recipient not in (None, TO_USER)):
            if self.recipient is None:
                line, newline, rest = self.buffer.partition("\n")
                if not newline:
                    if done:                              # a name and no line: text
                        content.append(self.buffer)
                        self.buffer = ""
                    break
                self.recipient, self.buffer = line.strip(), rest
                continue
            at = self.buffer.find(SEPARATOR)
            if self.recipient == TO_USER:
                end = at if at >= 0 else \
                    len(self.buffer) - (0 if done else held(self.buffer, [SEPARATOR]))
                content.append(self.buffer[:end])
                self.buffer = self.buffer[end:]
                if at < 0:
                    break
            else:
                if at < 0 and not done:
                    break
                body, self.buffer = (self.buffer, "") if at < 0 else \
                    (self.buffer[:at], self.buffer[at:])
                self._read_call(body, closed=at >= 0 or not done, content=content,
                                calls=calls)
            if self.buffer.startswith(SEPARATOR):
                self.buffer, self.recipient = self.buffer[len(SEPARATOR):], None
        return "".join(content), "", calls

    def finish(self) -> tuple[str, str, list[dict]]:
        return self.push("", done=True)

    def _read_call(self, body: str, closed: bool, content: list, calls: list) -> None:
        name = self.recipient or ""
        parsed, cut = (named_call(name, body) if self.tools else None), False
        if parsed is None and self.tools and not closed and body.strip():   # cut short
            parsed, cut = named_call(name, closed_json(body.strip())), True
        if parsed is None:
            content.append(f"{SEPARATOR}{name}\n{body}")
        else:
            call: dict[str, Any] = {"id": call_id(), "function": {
                "index": self.index, "name": parsed[0], "arguments": parsed[1]}}
            if cut:
                call["cut"] = True
                call["function"]["arguments"] = body.strip()
            calls.append(call)
            self.index += 1
        self.recipient = None


EXTRACTORS["recipients"] = RecipientExtractor

FUNCTIONARY_V32 = register(Format(
    "functionary-v3.2", lambda t: ">>>${recipient}" in t, extractor="recipients",
    call_text=lambda name, args: f"{name}\n{args}"), rank=24)
FUNCTIONARY = register(Format(
    "functionary", lambda t: "<function=" in t and "<|start_header_id|>" in t,
    tool=("<function=", "</function>"), parse_call=function_tag_call,
    call_text=lambda name, args: f"<function={name}>{args}</function>"), rank=25)
