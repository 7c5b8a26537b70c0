"""What a model family's replies look like (Format), and the registry of them.

Each family's module (or each syntax's, that several families share: see __init__.py)
registers its formats with a rank: format_for(template) is the first, by rank, that
recognizes a chat template (as Ollama infers tags from a template), so a more particular
format (Qwen3-Coder's XML calls) comes before a more general one (Qwen's JSON calls). A
template no format recognizes is PLAIN: its text is content, and the model reports no tools
or thinking capability. EXTRACTORS holds the classes that follow a reply (extractor.py's
tags, harmony.py's channels, functionary.py's recipients)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .calls import closed_json, json_call


@dataclass(frozen=True)
class TextCall:
    """How a family writes a call whose arguments are text, as format strings: its start
    (of {name}), each parameter's opening and closing (of {parameter}; {string}: "true" for
    a string value, else "false"; {type}: the value's JSON type, numbers as "number"), and
    its end. A forced call is written so (grammar.py)."""
    start: str
    parameter_open: str
    parameter_close: str
    end: str


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
    text_call: TextCall | None = None         # arguments as text: how a call is written
    # a family's own grammar of a forced call: (name, parameter schema, text -> Lark) -> Lark
    call_grammar: Callable[[str, dict, Callable[[str], str]], str] | None = None
    special_tags: tuple[str, ...] = ()        # more tags a forced call writes as tokens
    # text arguments: what a whole call's body holds; an unclosed call without it is cut
    body_end: str | None = None
    # where a call's arguments begin (a cut call's are the text after the first found)
    arguments_after: tuple[str, ...] = ('"arguments"', '"parameters"')

    @property
    def tags(self) -> list[str]:
        """The tags this format's replies hold (a forced call writes each that is a single
        token as that token)."""
        pairs = [t for pair in (self.think, self.tool) if pair for t in pair if t]
        return list(dict.fromkeys([*pairs, *self.special_tags]))

    @property
    def thinking_tags(self) -> tuple[str, str] | None:
        """What a format (a schema) leaves free before the answer: (open, close)."""
        return self.answer_after or self.think


FORMATS: list[Format] = []            # by rank, the most particular first
_RANKS: dict[str, int] = {}
PLAIN = Format("plain", lambda t: True)
# Format.extractor -> the class that follows one reply in that format
EXTRACTORS: dict[str, type] = {}


def register(fmt: Format, rank: int) -> Format:
    """Add fmt to FORMATS, tried before formats of a higher rank."""
    if fmt.name in _RANKS:
        raise ValueError(f"A reply format named {fmt.name!r} is already registered.")
    _RANKS[fmt.name] = rank
    FORMATS.append(fmt)
    FORMATS.sort(key=lambda f: _RANKS[f.name])
    return fmt


def format_for(template: str | None) -> Format:
    return next((f for f in FORMATS if template and f.recognize(template)), PLAIN)


def make_extractor(fmt: Format, **options):
    """An extractor for one reply in fmt (options: extractor.Extractor's)."""
    return EXTRACTORS[fmt.extractor](fmt, **options)
