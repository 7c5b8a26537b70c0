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
before they run."""

from __future__ import annotations

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
    def bounded(*args, **kwargs):
        _check_count(*args[1:], *kwargs.values())
        return filter_function(*args, **kwargs)

    bounded.__name__ = filter_function.__name__
    return bounded


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
        super().__init__(extensions=EXTENSIONS, **options)
        for name, function in (("center", do_center), ("indent", do_indent),
                               ("wordwrap", do_wordwrap), ("format", do_format)):
            self.filters[name] = _bounded(function)

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
