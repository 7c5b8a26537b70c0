"""A jinja2 sandbox with bounds, for chat templates that come from strangers (a model file, a
request's `template`): a render that runs past its time, or builds a string or list larger
than a prompt could be, stops with TemplateLimit instead of freezing or exhausting the
process. jinja2's own sandbox already refuses unsafe attributes and caps range() at 100000.
Templates may change the lists and dicts they build (list.append, dict.update: Kimi's do),
as transformers' sandbox allows; the caller renders copies of its values (template.py), so
nothing a template changes reaches them, and a list or dict that a call grows is measured.
`{% generation %}...{% endgeneration %}` (transformers' mark of the assistant's text, in
LFM2.5's and Laguna's templates) renders its body.

Time is watched by a trace function on the template's own frames (templates compile to
Python), which also checks the size of its variables every millisecond, so a loop that
doubles a string is stopped about one doubling past the limit. Single operations that could
allocate without bound (`*`, `**`, `%` widths, padding filters and methods) are checked
before they run, and so are those that write a value out whole (a printed value, join,
string, replace, escaping filters, expandtabs): a list may hold one long string many times
over at no cost, its text not. lipsum, Jinja's filler text (unbounded, and no chat
template's), is not offered."""

from __future__ import annotations

import functools
import re
import sys
import time
from collections.abc import Callable

from jinja2 import TemplateError, nodes
from jinja2.ext import Extension
from jinja2.filters import do_center, do_format, do_indent, do_wordwrap
from jinja2.parser import Parser
from jinja2.sandbox import SandboxedEnvironment
from jinja2.utils import Namespace

LONGEST = 32 << 20            # characters (or items) any value of a render may have
SECONDS = 5.0                 # a render's time
SCAN_EVERY = 0.001            # seconds between checks of the template's variables' sizes
WIDE_FORMAT = re.compile(r"%[-+ #0]*(\*|\d{7,})|\{[^}]*:[^}]*\d{7,}")


class TemplateLimit(TemplateError):
    """A template went past its bounds; the message says which."""


def _sized(value) -> int:
    return len(value) if isinstance(value, (str, bytes, list, tuple, dict)) else 0


def _check_size(value) -> None:
    if _sized(value) > LONGEST:
        raise TemplateLimit(f"the template built a value of more than {LONGEST} characters "
                            "or items")


def _check_count(*numbers) -> None:
    for number in numbers:
        if isinstance(number, int) and not isinstance(number, bool) and \
                abs(number) > LONGEST:
            raise TemplateLimit(f"the template asked for a size of {number}, above {LONGEST}")


def _bounded(filter_function: Callable) -> Callable:
    @functools.wraps(filter_function)             # with jinja2's mark of what it is passed
    def bounded(*args, **kwargs):
        _check_count(*args[1:], *kwargs.values())
        return filter_function(*args, **kwargs)

    return bounded


CONTAINERS = (list, tuple, dict, set, frozenset)


def text_weight(value, limit: int | None = None) -> int:
    """At least how many characters value's text takes (printed, str, repr or JSON):
    strings their length, containers their items' (each time they hold one: counted once,
    then remembered), anything else 1; counted until past limit (LONGEST)."""
    limit = LONGEST if limit is None else limit
    if not isinstance(value, CONTAINERS):
        return len(value) if isinstance(value, (str, bytes)) else 1
    weights: dict[int, int] = {id(value): 2}           # a container met again inside itself
    frames = [[value, iter(_items(value)), 2 + len(value)]]
    total = frames[0][2]
    while frames and total <= limit:
        frame = frames[-1]
        item = next(frame[1], frames)                  # frames: the items ran out
        if item is frames:
            frames.pop()
            weights[id(frame[0])] = frame[2]
            if frames:
                frames[-1][2] += frame[2]
        elif isinstance(item, CONTAINERS) and id(item) not in weights:
            weights[id(item)] = 2
            frames.append([item, iter(_items(item)), 2 + len(item)])
            total += 2 + len(item)
        else:
            weight = weights[id(item)] if isinstance(item, CONTAINERS) else \
                len(item) if isinstance(item, (str, bytes)) else 1
            frame[2] += weight
            total += weight
    return total


def _items(container):
    return (part for pair in container.items() for part in pair) \
        if isinstance(container, dict) else container


def _check_written(size: int) -> None:
    if size > LONGEST:
        raise TemplateLimit(f"the template would write a value of more than {LONGEST} "
                            "characters")


def check_text(value, expansion: int = 1) -> None:
    """TemplateLimit unless value's text, each character written as up to expansion (an
    escape), stays within LONGEST characters."""
    _check_written(text_weight(value, LONGEST // expansion) * expansion)


def writing(filter_function: Callable, expansion: int = 1) -> Callable:
    """filter_function with its value's text checked first (check_text); a generator it
    would read is read into a list first."""
    at = 1 if getattr(filter_function, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(filter_function)
    def bounded(*args, **kwargs):
        value = args[at]
        if not isinstance(value, (str, bytes, *CONTAINERS)) and hasattr(value, "__iter__"):
            value = list(value)
        check_text(value, expansion)
        return filter_function(*args[:at], value, *args[at + 1:], **kwargs)

    return bounded


def _check_replace(text, old="", new="", count=-1, *_) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        found = len(text) + 1 if not old else text.count(old)
        if isinstance(count, int) and count >= 0:
            found = min(found, count)
        _check_written(len(text) + found * (len(new) - len(old)))


def _replacing(replace: Callable) -> Callable:
    @functools.wraps(replace)
    def bounded(eval_ctx, text, old, new, count=None):
        _check_replace(str(text), str(old), str(new), count)
        return replace(eval_ctx, text, old, new, count)

    return bounded


def _check_join(separator: str, items=(), *_) -> None:
    if isinstance(items, CONTAINERS):
        _check_written(len(separator) * max(len(items) - 1, 0) + text_weight(items))


def _check_expandtabs(text: str, size=8, *_) -> None:
    if isinstance(size, int):
        _check_written(len(text) + text.count("\t") * size)


# str methods that may write more than they are given, checked before they run
STR_METHODS: dict[str, Callable] = {"replace": _check_replace, "join": _check_join,
                                    "expandtabs": _check_expandtabs}
# filters that write their value's text whole -> how many characters a character may
# become (an escape; a list's 8 bytes an item)
WRITING_FILTERS = {"join": 1, "string": 10, "pprint": 10, "escape": 6, "e": 6,
                   "forceescape": 6, "urlencode": 9, "list": 8}


def _printed(value):
    """A printed value ({{ value }}), checked before it is made text."""
    if isinstance(value, CONTAINERS):
        check_text(value, 10)
    return value


class GenerationMark(Extension):
    """{% generation %}body{% endgeneration %}: the body, as if unmarked."""
    tags = {"generation"}

    def parse(self, parser: Parser) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


EXTENSIONS = ["jinja2.ext.loopcontrols", GenerationMark]


class BoundedSandbox(SandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self, **options):
        super().__init__(extensions=EXTENSIONS, finalize=_printed, **options)
        for name, function in (("center", do_center), ("indent", do_indent),
                               ("wordwrap", do_wordwrap), ("format", do_format)):
            self.filters[name] = _bounded(function)
        for name, expansion in WRITING_FILTERS.items():
            self.filters[name] = writing(self.filters[name], expansion)
        self.filters["replace"] = _replacing(self.filters["replace"])
        del self.globals["lipsum"]

    def call_binop(self, context, operator, left, right):
        if operator == "*":
            count = right if isinstance(right, int) else left if isinstance(left, int) else 1
            _check_count(count * max(_sized(left), _sized(right), 1))
        elif operator == "**" and isinstance(right, (int, float)) and right > 64 and \
                isinstance(left, (int, float)) and abs(left) > 1:
            raise TemplateLimit(f"the template raised a number to the power {right}")
        elif operator == "%" and isinstance(left, str) and WIDE_FORMAT.search(left):
            raise TemplateLimit("the template formats with a width above the limit")
        result = super().call_binop(context, operator, left, right)
        _check_size(result)
        return result

    def wrap_str_format(self, value):
        """str.format and format_map, refused when their text asks for a huge width."""
        owner = getattr(value, "__self__", None)
        if isinstance(owner, str) and WIDE_FORMAT.search(owner) and \
                getattr(value, "__name__", "") in ("format", "format_map"):
            raise TemplateLimit("the template formats with a width above the limit")
        return super().wrap_str_format(value)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja2's signature)
        _check_count(*args, *kwargs.values())
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str) and getattr(__obj, "__name__", "") in STR_METHODS:
            try:
                STR_METHODS[__obj.__name__](owner, *args, *kwargs.values())
            except TypeError:
                pass                                   # the call itself will say what
        result = super().call(__context, __obj, *args, **kwargs)
        _check_size(result)
        _check_size(getattr(__obj, "__self__", None))     # a list or dict a method grew
        return result


def render_bounded(template, seconds: float | None = None, **context) -> str:
    """template.render(**context) within seconds (SECONDS) and LONGEST characters."""
    seconds = SECONDS if seconds is None else seconds
    deadline = time.monotonic() + seconds
    scanned = [time.monotonic()]

    def watch(frame, event, arg):
        if frame.f_code.co_filename != "<template>":
            return None
        now = time.monotonic()
        if now > deadline:
            raise TemplateLimit(f"the template ran longer than {seconds:g} s")
        if now - scanned[0] > SCAN_EVERY:           # building 32M characters takes longer
            scanned[0] = now
            for value in frame.f_locals.values():
                _check_size(value)
                if isinstance(value, Namespace):
                    for held in value._Namespace__attrs.values():   # noqa: SLF001
                        _check_size(held)
        return watch

    previous = sys.gettrace()
    sys.settrace(watch)
    try:
        pieces, size = [], 0
        for piece in template.generate(**context):
            size += len(piece)
            if size > LONGEST:
                raise TemplateLimit(f"the template wrote more than {LONGEST} characters")
            pieces.append(piece)
        return "".join(pieces)
    finally:
        sys.settrace(previous)
