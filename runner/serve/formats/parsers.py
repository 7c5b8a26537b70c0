"""Thinking and tool calls, taken out of the generated text as it streams.

A model family writes them its own way; FORMATS names each way and recognizes it in the chat
template (as Ollama infers tags from a template): Qwen's <think> and <tool_call>{json}
</tool_call>, Qwen3-Coder's and Qwen 3.5's XML parameters in <tool_call>, Mistral's
[TOOL_CALLS] (v11's NAME[ARGS]{json}, with or without [CALL_ID], or the older JSON array)
and [THINK], DeepSeek V3.1's tool-call tokens, Llama 3's bare JSON call, Gemma 4's
<|channel>thought ... <channel|> and <|tool_call>call:name{key:<|"|>text<|"|>}<tool_call|>,
gpt-oss's harmony channels (its own extractor, harmony.py); calls.py reads each family's
call. A model whose template matches none still works: its text is content and it reports
no tools or thinking capability.

An Extractor follows one reply: push(text) returns the content, thinking and tool calls that
text completed; a tag split across pieces is held back until it is whole, so no tag ever
reaches content or thinking. A tool call that does not parse is released as content.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from .calls import (DEEPSEEK_SEPARATOR, call_id, closed_after, closed_json, deepseek_call,
                    gemma_call, json_call, mistral_calls, typed, xml_call)


@dataclass(frozen=True)
class Format:
    name: str
    recognize: Callable[[str], bool]          # from the chat template
    think: tuple[str, str] | None = None      # open and close tags
    think_label: str = ""                     # text after the open tag that is not thinking
    tool: tuple[str, str | None] | None = None     # no close: a call runs to the next or end
    # body -> (name, arguments[, id]), a list of them, or None (calls.py)
    parse_call: Callable[[str], tuple | list | None] = json_call
    bare_json: bool = False                   # a reply that is a JSON object is a call
    call_text: Callable[[str, str], str] | None = None   # name, JSON args -> its text
    extractor: str = "tags"                   # a key of EXTRACTORS
    typed_arguments: bool = False             # arguments come as text: typed by the schema
    drop: tuple[str, ...] = ()                # wrappers around calls, no one's text
    repair: Callable[[str], str] = closed_json    # a call's body cut off, closed
    # a format holds the answer after these (open, close); None: the think tags
    answer_after: tuple[str, str] | None = None

    @property
    def thinking_tags(self) -> tuple[str, str] | None:
        """What a format (a schema) leaves free before the answer: (open, close)."""
        return self.answer_after or self.think


FORMATS = [
    Format("harmony", lambda t: "<|channel|>" in t and "<|message|>" in t,
           extractor="harmony", answer_after=("<|channel|>", "<|channel|>final<|message|>")),
    Format("gemma4", lambda t: "<|tool_call>" in t or "<|channel>" in t,
           think=("<|channel>", "<channel|>"), think_label="thought\n",
           tool=("<|tool_call>", "<tool_call|>"), parse_call=gemma_call),
    # Qwen3-Coder and Qwen 3.5: XML parameters inside <tool_call>
    Format("qwen3coder", lambda t: "<function=" in t and "<parameter=" in t,
           think=("<think>", "</think>"), tool=("<tool_call>", "</tool_call>"),
           parse_call=xml_call, typed_arguments=True),
    Format("mistral", lambda t: "[TOOL_CALLS]" in t or "[THINK]" in t,
           think=("[THINK]", "[/THINK]"), tool=("[TOOL_CALLS]", None),
           parse_call=mistral_calls, repair=closed_after("[ARGS]"),
           call_text=lambda name, args: f"[TOOL_CALLS]{name}[ARGS]{args}"),
    Format("deepseek3", lambda t: "<｜tool▁call▁begin｜>" in t,
           think=("<think>", "</think>"), tool=("<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"),
           parse_call=deepseek_call, drop=("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"),
           repair=closed_after(DEEPSEEK_SEPARATOR),
           call_text=lambda name, args: f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>{name}"
                                        f"<｜tool▁sep｜>{args}<｜tool▁call▁end｜>"
                                        "<｜tool▁calls▁end｜>"),
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
            body, closed, rest = self.buffer.partition(close)
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
        elif not closed and self.format.name in XML_FORMATS and "</function>" not in body:
            cut = True                           # its parameters parse as far as they go
        if parsed is None:
            content.append(opening + body + (close if closed else ""))
        else:
            found = [self._call(*item) for item in (parsed if isinstance(parsed, list)
                                                    else [parsed])]
            if cut:                              # the last call is unfinished: it says so
                found[-1]["cut"] = True
                found[-1]["function"]["arguments"] = partial_arguments(
                    body, found[-1]["function"]["arguments"])
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


# Format.extractor -> the class that follows a reply (harmony.py adds its own)
EXTRACTORS: dict[str, type] = {"tags": Extractor}


def make_extractor(fmt: Format, **options):
    """An extractor for one reply in fmt (options: Extractor's)."""
    return EXTRACTORS[fmt.extractor](fmt, **options)


def partial_arguments(body: str, repaired: dict) -> str:
    """A cut call's arguments as far as the model wrote them: the text after its
    "arguments" key or its family's separator, else the repaired arguments' JSON without its close
    (nothing where there are none)."""
    for marker in ('"arguments"', '"parameters"', "[ARGS]", DEEPSEEK_SEPARATOR):
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


def compact(schema: dict) -> dict:
    """schema for llguidance with JSON's whitespace fixed (", " and ": "): a free choice of
    whitespace lets a weak model pad a call until its tokens run out."""
    return dict(schema, **{"x-guidance": {"whitespace_flexible": False,
                                          "item_separator": ", ", "key_separator": ": "}})


def forced_call_grammar(fmt: Format, tools: list[dict], token_of: Callable[[str], int | None]
                        ) -> str | None:
    """A grammar (llguidance's Lark) that makes the reply one call of one of tools, its
    arguments valid for the tool's parameter schema, written as fmt writes calls (None when
    fmt has no way to write one). token_of(tag) is the id of a tag that is a single token."""
    if (fmt.call_text is None and fmt.name not in XML_FORMATS) or not tools:
        return None
    alternatives = []
    for tool in tools:
        function = tool.get("function", tool)
        schema = function.get("parameters") or {"type": "object"}
        if fmt.name in XML_FORMATS:
            alternatives.append(_xml_lark(function["name"], schema, fmt, token_of))
            continue
        before, _, after = fmt.call_text(function["name"], "\x00").partition("\x00")
        alternatives.append(" ".join(filter(None, (
            _lark_text(before, fmt, token_of), "%json " + json.dumps(compact(schema)),
            _lark_text(after, fmt, token_of)))))
    return "%llguidance {}\nstart: " + " | ".join(f"({a})" for a in alternatives) + "\n"


XML_FORMATS = ("qwen3coder",)
TEXT_VALUE = "/[^<\\n][^<]*/"          # a string parameter's text (up to the next tag)


def _xml_lark(name: str, schema: dict, fmt: Format, token_of) -> str:
    """A Qwen3-Coder call of name as Lark: its required parameters in the schema's order,
    each value text (strings, an enum's words) or JSON of its schema."""
    parts = [_lark_text(f"<tool_call>\n<function={name}>\n", fmt, token_of)]
    required = set(schema.get("required") or [])
    for parameter, spec in (schema.get("properties") or {}).items():
        if parameter not in required:
            continue
        spec = spec if isinstance(spec, dict) else {}
        if spec.get("type") == "string" and spec.get("enum"):
            value = "(" + " | ".join(json.dumps(str(v)) for v in spec["enum"]) + ")"
        elif spec.get("type") == "string":
            value = TEXT_VALUE
        else:
            value = "%json " + json.dumps(spec or {})
        parts += [json.dumps(f"<parameter={parameter}>\n"), value,
                  json.dumps("\n</parameter>\n")]
    parts.append(_lark_text("</function>\n</tool_call>", fmt, token_of))
    return " ".join(parts)


def _lark_text(text: str, fmt: Format, token_of) -> str:
    """text as Lark: its tags as token references where they are single tokens."""
    tags = [t for pair in (fmt.think, fmt.tool) if pair for t in pair if t]
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
