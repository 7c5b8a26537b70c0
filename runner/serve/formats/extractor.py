"""Following one reply as it streams (Extractor): push(text) returns the content, thinking
and tool calls that text completed, in the reply's Format. A tag split across pieces is held
back until it is whole, so no tag ever reaches content or thinking; a tool call that does
not parse is released as content; a call the length cut is marked cut, its arguments as far
as they were written."""

from __future__ import annotations

import json

from .calls import call_id, typed
from .format import EXTRACTORS, Format


def _first(parsed):
    return parsed[0] if isinstance(parsed, list) else parsed


def held(text: str, tags) -> int:
    """How many characters at the end of text could start one of tags."""
    longest = 0
    for tag in tags:
        for size in range(min(len(tag) - 1, len(text)), 0, -1):
            if text.endswith(tag[:size]):
                longest = max(longest, size)
                break
    return longest


class Extractor:
    CONTENT, THINKING, TOOL, BARE = range(4)

    def __init__(self, fmt: Format, tools: bool | list = False, thinking: bool = True,
                 start_thinking: bool = False):
        """tools: calls are expected (the tools themselves, or True); thinking: thinking is
        wanted (else it is dropped); start_thinking: the prompt ended with the opening think
        tag."""
        self.format, self.tools, self.thinking = fmt, bool(tools), thinking
        self.schemas = {t.get("function", t).get("name"): t.get("function", t).get("parameters")
                        for t in tools} if isinstance(tools, list) else {}
        self.state = self.THINKING if start_thinking and fmt.think else \
            self.BARE if tools and fmt.bare_json else self.CONTENT
        self.buffer, self.index = "", 0
        self._label_pending = False
        self._strip = False           # whitespace after a closing tag belongs to no one

    def push(self, text: str, done: bool = False) -> tuple[str, str, list[dict]]:
        """(content, thinking, tool calls) that text completes; done flushes the rest."""
        self.buffer += text
        content: list[str] = []
        thinking: list[str] = []
        calls: list[dict] = []
        while self.buffer:
            before = (self.state, len(self.buffer))
            getattr(self, f"_{('content', 'thinking', 'tool', 'bare')[self.state]}")(
                done, content, thinking, calls)
            if (self.state, len(self.buffer)) == before:
                break
        return "".join(content), "".join(thinking) if self.thinking else "", calls

    def finish(self) -> tuple[str, str, list[dict]]:
        return self.push("", done=True)

    def _opening_tags(self) -> list[str]:
        tags = []
        if self.format.think:
            tags.append(self.format.think[0])
        if self.format.tool and self.tools:
            tags.append(self.format.tool[0])
        return tags

    def _content(self, done, content, thinking, calls) -> None:
        for wrapper in self.format.drop:
            self.buffer = self.buffer.replace(wrapper, "")
        if self._strip:
            self.buffer = self.buffer.lstrip()
            if not self.buffer:
                return
            self._strip = False
        tags = self._opening_tags()
        hits = [(self.buffer.find(tag), tag) for tag in tags if tag in self.buffer]
        if hits:
            where, tag = min(hits)
            content.append(self.buffer[:where])
            self.buffer = self.buffer[where + len(tag):]
            if self.format.think and tag == self.format.think[0]:
                self.state, self._label_pending = self.THINKING, True
            else:
                self.state = self.TOOL
            return
        keep = 0 if done else held(self.buffer, tags + list(self.format.drop))
        content.append(self.buffer[:len(self.buffer) - keep])
        self.buffer = self.buffer[len(self.buffer) - keep:]

    def _thinking(self, done, content, thinking, calls) -> None:
        label = self.format.think_label
        if self._label_pending and label:
            if self.buffer.startswith(label):
                self.buffer = self.buffer[len(label):]
            elif label.startswith(self.buffer) and not done:
                return                                        # wait: maybe the label
            self._label_pending = False
        assert self.format.think is not None          # thinking needs its tags
        close = self.format.think[1]
        if close in self.buffer:
            where = self.buffer.index(close)
            thinking.append(self.buffer[:where])
            self.buffer = self.buffer[where + len(close):]
            self.state = self.BARE if self.tools and self.format.bare_json else self.CONTENT
            self._strip = True
            return
        keep = 0 if done else held(self.buffer, [close])
        thinking.append(self.buffer[:len(self.buffer) - keep])
        self.buffer = self.buffer[len(self.buffer) - keep:]

    def _tool(self, done, content, thinking, calls) -> None:
        assert self.format.tool is not None           # a call needs its tags
        opening, close = self.format.tool
        if close is None:                        # the call runs to the next one or the end
            after = self.buffer.find(opening)
            if after < 0 and not done:
                return
            body, rest = (self.buffer, "") if after < 0 else \
                (self.buffer[:after], self.buffer[after:])
            closed, close = after >= 0, ""
        else:
            if close not in self.buffer and not done:
                return
            body, tag, rest = self.buffer.partition(close)
            closed = bool(tag)
            if not closed:                       # ended before the close tag, or inside it
                body = body[:len(body) - held(body, [close])]
        parsed, cut = self.format.parse_call(body.strip()), False
        if parsed is None and not closed:        # cut off (the length ran out) mid-call
            repaired = self.format.parse_call(self.format.repair(body.strip()))
            if repaired is None or ('"name"' in body and
                                    f'"{_first(repaired)[0]}"' not in body):
                self.buffer, self.state = rest, self.CONTENT   # cut before its name was
                return                                        # whole: no call, no markup
            parsed, cut = repaired, True
        elif not closed and self.format.typed_arguments and \
                not (self.format.body_end and self.format.body_end in body):
            cut = True                           # its parameters parse as far as they go
        if parsed is None:
            content.append(opening + body + (close if closed else ""))
        else:
            found = [self._call(*item) for item in (parsed if isinstance(parsed, list)
                                                    else [parsed])]
            if cut:                              # the last call is unfinished: it says so
                found[-1]["cut"] = True
                found[-1]["function"]["arguments"] = partial_arguments(
                    body, found[-1]["function"]["arguments"], self.format)
            calls += found
        self.buffer, self.state, self._strip = rest, self.CONTENT, True

    def _bare(self, done, content, thinking, calls) -> None:
        """Llama 3: a reply that starts with a JSON object is a call, if it is one."""
        text = self.buffer.lstrip()
        if text.startswith("<|python_tag|>"):
            text = text[len("<|python_tag|>"):].lstrip()
        if not text:
            if done:
                self.buffer = ""
            return
        if not text.startswith("{"):
            self.state = self.CONTENT
            return
        end = _object_end(text)
        if end is None and not done:
            return
        parsed = self.format.parse_call(text[:end]) if end else None
        if parsed is None:
            self.state = self.CONTENT
            content.append(self.buffer)
            self.buffer = ""
            return
        calls.append(self._call(*parsed))
        self.buffer = text[end:].lstrip().lstrip(";").lstrip()

    def _call(self, name: str, arguments: dict, ident: str | None = None) -> dict:
        if self.format.typed_arguments:
            arguments = typed(arguments, self.schemas.get(name))
        call = {"id": ident or call_id(), "function": {"index": self.index, "name": name,
                                                        "arguments": arguments}}
        self.index += 1
        return call


EXTRACTORS["tags"] = Extractor


def partial_arguments(body: str, repaired: dict, fmt: Format) -> str:
    """A cut call's arguments as far as the model wrote them: the text after where fmt's
    arguments begin, else the repaired arguments' JSON without its close (nothing where
    there are none)."""
    for marker in fmt.arguments_after:
        at = body.find(marker)
        if at >= 0:
            return body[at + len(marker):].lstrip().removeprefix(":").strip()
    return json.dumps(repaired)[:-1] if repaired else ""


def _object_end(text: str) -> int | None:
    """The end of the JSON object text starts with, or None if it is not complete yet."""
    depth, quoted, escaped = 0, False, False
    for i, ch in enumerate(text):
        if quoted:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
            continue
        if ch == '"':
            quoted = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None
