"""Thinking and tool calls, taken out of the generated text as it streams.

A model family writes them its own way; FORMATS names each way and recognizes it in the chat
template (as Ollama infers tags from a template): Qwen's <think> and <tool_call>{json}
</tool_call>, Llama 3's bare JSON call, Gemma 4's <|channel>thought ... <channel|> and
<|tool_call>call:name{key:<|"|>text<|"|>}<tool_call|>, gpt-oss's harmony channels (its own
extractor, harmony.py). A model whose template matches none still works: its text is
content and it reports no tools or thinking capability.

An Extractor follows one reply: push(text) returns the content, thinking and tool calls that
text completed; a tag split across pieces is held back until it is whole, so no tag ever
reaches content or thinking. A tool call that does not parse is released as content.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from dataclasses import dataclass
from typing import Callable

ALPHANUMERIC = string.ascii_letters + string.digits


def call_id() -> str:
    return "call_" + "".join(secrets.choice(ALPHANUMERIC) for _ in range(8))


def _json_call(body: str) -> tuple[str, dict] | None:
    """{"name": ..., "arguments" (or "parameters"): {...}} -> (name, arguments)."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    return (value["name"], arguments) if isinstance(arguments, dict) else None


GEMMA_STRING = '<|"|>'
GEMMA_KEY = re.compile(r'([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)(\s*:)')


def _gemma_call(body: str) -> tuple[str, dict] | None:
    """call:name{key:<|"|>text<|"|>,count:3} -> (name, arguments)."""
    found = re.match(r"\s*call:([A-Za-z0-9_.\-]+)\s*(\{.*\})\s*$", body, re.S)
    if found is None:
        return None
    pieces = found.group(2).split(GEMMA_STRING)
    if len(pieces) % 2 == 0:
        return None
    # outside strings: quote the bare keys; inside: JSON strings
    text = "".join(GEMMA_KEY.sub(r'\1"\2"\3', piece) if i % 2 == 0 else json.dumps(piece)
                   for i, piece in enumerate(pieces))
    return _json_call(json.dumps({"name": found.group(1), "arguments": "__ARGS__"})
                      .replace('"__ARGS__"', text))


@dataclass(frozen=True)
class Format:
    name: str
    recognize: Callable[[str], bool]          # from the chat template
    think: tuple[str, str] | None = None      # open and close tags
    think_label: str = ""                     # text after the open tag that is not thinking
    tool: tuple[str, str] | None = None
    parse_call: Callable[[str], tuple[str, dict] | None] = _json_call
    bare_json: bool = False                   # a reply that is a JSON object is a call
    call_text: Callable[[str, str], str] | None = None   # name, JSON args -> its text
    extractor: str = "tags"                   # a key of EXTRACTORS


FORMATS = [
    Format("harmony", lambda t: "<|channel|>" in t and "<|message|>" in t,
           extractor="harmony"),
    Format("gemma4", lambda t: "<|tool_call>" in t or "<|channel>" in t,
           think=("<|channel>", "<channel|>"), think_label="thought\n",
           tool=("<|tool_call>", "<tool_call|>"), parse_call=_gemma_call),
    Format("qwen", lambda t: "<tool_call>" in t or "<think>" in t,
           think=("<think>", "</think>"), tool=("<tool_call>", "</tool_call>"),
           call_text=lambda name, args: f'<tool_call>\n{{"name": "{name}", "arguments": '
                                        f"{args}}}\n</tool_call>"),
    Format("llama3", lambda t: "<|start_header_id|>" in t and "parameters" in t,
           bare_json=True,
           call_text=lambda name, args: f'{{"name": "{name}", "parameters": {args}}}'),
]
PLAIN = Format("plain", lambda t: True)


def format_for(template: str | None) -> Format:
    return next((f for f in FORMATS if template and f.recognize(template)), PLAIN)


def closed_json(text: str) -> str:
    """JSON cut off somewhere, closed where it stopped: an open string ended, a key without
    its value or a dangling separator dropped, open arrays and objects closed (a call cut by
    max_tokens is still a call, with the arguments it got to)."""
    closers, in_string, escaped = [], False, False
    key_at = None                  # where an object's key began, until its value does
    last = ""                      # the last character outside strings, spaces aside
    for at, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if last == ":" and not char.isspace():
            key_at = None                        # its value begins
        if char == '"':
            in_string = True
            if closers and closers[-1] == "}" and last in "{,":
                key_at = at
        elif char in "{[":
            closers.append("}" if char == "{" else "]")
        elif char in "}]" and closers:
            closers.pop()
        if not char.isspace():
            last = char
    if key_at is not None:                       # a key cut off, or not yet given a value
        text = text[:key_at]
    elif in_string:
        text = text[:-1] if escaped else text
        text += '"'
    text = text.rstrip()
    while text and text[-1] in ",:":
        text = text[:-1].rstrip()
    for word in ("true", "false", "null"):              # a literal cut off
        cut = next((n for n in range(len(word) - 1, 0, -1) if text.endswith(word[:n])), 0)
        if cut and text[:-cut].rstrip()[-1:] in (":", ",", "["):
            text += word[cut:]
            break
    return text + "".join(reversed(closers))


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

    def __init__(self, fmt: Format, tools: bool = False, thinking: bool = True,
                 start_thinking: bool = False):
        """tools: calls are expected; thinking: thinking is wanted (else it is dropped);
        start_thinking: the prompt ended with the opening think tag."""
        self.format, self.tools, self.thinking = fmt, tools, thinking
        self.state = self.THINKING if start_thinking and fmt.think else \
            self.BARE if tools and fmt.bare_json else self.CONTENT
        self.buffer, self.index = "", 0
        self._label_pending = False
        self._strip = False           # whitespace after a closing tag belongs to no one

    def push(self, text: str, done: bool = False) -> tuple[str, str, list[dict]]:
        """(content, thinking, tool calls) that text completes; done flushes the rest."""
        self.buffer += text
        content, thinking, calls = [], [], []
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
        keep = 0 if done else held(self.buffer, tags)
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
        close = self.format.tool[1]
        if close not in self.buffer and not done:
            return
        body, _, rest = self.buffer.partition(close)
        if not _:                                # ended before the close tag, or inside it
            body = body[:len(body) - held(body, [close])]
        parsed = self.format.parse_call(body.strip())
        if parsed is None and not _:             # cut off (the length ran out) mid-call
            parsed = self.format.parse_call(closed_json(body.strip()))
            if parsed is not None and f'"{parsed[0]}"' not in body:
                parsed = None                    # its name itself was cut
        if parsed is None:
            content.append(self.format.tool[0] + body + (close if _ else ""))
        else:
            calls.append(self._call(*parsed))
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

    def _call(self, name: str, arguments: dict) -> dict:
        call = {"id": call_id(), "function": {"index": self.index, "name": name,
                                               "arguments": arguments}}
        self.index += 1
        return call


# Format.extractor -> the class that follows a reply (harmony.py adds its own)
EXTRACTORS: dict[str, type] = {"tags": Extractor}


def make_extractor(fmt: Format, **options):
    """An extractor for one reply in fmt (options: Extractor's)."""
    return EXTRACTORS[fmt.extractor](fmt, **options)


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


def forced_call_grammar(fmt: Format, tools: list[dict], token_of: Callable[[str], int | None]
                        ) -> str | None:
    """A grammar (llguidance's Lark) that makes the reply one call of one of tools, its
    arguments valid for the tool's parameter schema, written as fmt writes calls (None when
    fmt has no way to write one). token_of(tag) is the id of a tag that is a single token."""
    if fmt.call_text is None or not tools:
        return None
    alternatives = []
    for tool in tools:
        function = tool.get("function", tool)
        schema = function.get("parameters") or {"type": "object"}
        before, _, after = fmt.call_text(function["name"], "\x00").partition("\x00")
        alternatives.append(" ".join(filter(None, (
            _lark_text(before, fmt, token_of), "%json " + json.dumps(schema),
            _lark_text(after, fmt, token_of)))))
    return "%llguidance {}\nstart: " + " | ".join(f"({a})" for a in alternatives) + "\n"


def _lark_text(text: str, fmt: Format, token_of) -> str:
    """text as Lark: its tags as token references where they are single tokens."""
    tags = [t for pair in (fmt.think, fmt.tool) if pair for t in pair]
    parts, rest = [], text
    while rest:
        hits = [(rest.find(tag), tag) for tag in tags if tag in rest]
        if not hits:
            parts.append(json.dumps(rest))
            break
        where, tag = min(hits)
        if where:
            parts.append(json.dumps(rest[:where]))
        token = token_of(tag)
        parts.append(f"<[{token}]>" if token is not None else json.dumps(tag))
        rest = rest[where + len(tag):]
    return " ".join(parts)
