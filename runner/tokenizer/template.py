"""Chat templates: the model's own (jinja2, from tokenizer.chat_template), else Gemma's
well-known turn format for gemma models whose file carries none, or a renderer in code for
a family whose format is not a template (gpt-oss's harmony, as Ollama renders it)."""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Iterator

from jinja2 import TemplateError, meta

from . import harmony
from .messages import check_messages
from . import sandbox
from .sandbox import BoundedSandbox, TemplateLimit, render_bounded

# Gemma has no system role: its own template puts the system text before the first turn's
GEMMA_TURNS = (
    "{% set turns = messages %}{% set prefix = '' %}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set prefix = (messages[0]['content'] | trim) ~ '\n\n' %}"
    "{% set turns = messages[1:] %}{% endif %}"
    "{% for message in turns %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "<start_of_turn>{{ role }}\n{{ (prefix if loop.first else '') ~ (message['content'] | trim) }}"
    "<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
FALLBACKS = {"gemma3": GEMMA_TURNS, "gemma2": GEMMA_TURNS, "gemma": GEMMA_TURNS}


def _raise(message: str):
    raise TemplateError(message)


def _jsonable(value):
    """What json cannot write as is: a generator (a template's `map` or `select`) as the
    list it yields."""
    if isinstance(value, Iterator):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _tojson(value, indent=None, ensure_ascii=False, sort_keys=False, separators=None):
    """json.dumps's text, written a piece at a time up to the sandbox's LONGEST characters
    (a list may hold one long string many times over)."""
    encoder = json.JSONEncoder(indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys,
                               separators=separators, default=_jsonable)
    pieces, size = [], 0
    for piece in encoder.iterencode(value):
        size += len(piece)
        if size > sandbox.LONGEST:
            raise TemplateLimit(f"the template would write a value of more than "
                                f"{sandbox.LONGEST} characters")
        pieces.append(piece)
    return "".join(pieces)


# variables a template may read without setting, that no chat API passes: FireFunction v2
# reads the tools as `functions` (JSON text) and the date as `datetime`, as llama.cpp gives
# them (name -> its value, from the request's tools)
READ_UNSET = {
    "functions": lambda tools: json.dumps(tools or [], indent=2),
    "datetime": lambda tools: datetime.datetime.now(datetime.timezone.utc).strftime(
        "%b %d %Y %H:%M:%S GMT"),
}

# architecture -> (the reply format's name, render(messages, tools, reasoning_effort))
RENDERERS = {"gpt-oss": ("harmony", harmony.render), "gptoss": ("harmony", harmony.render)}


def template_for(metadata: dict) -> str | None:
    return metadata.get("tokenizer.chat_template") or \
        FALLBACKS.get(metadata.get("general.architecture", ""))


def check_template(template: str) -> None:
    """A ValueError naming the problem unless template compiles as a Jinja chat template
    (an Ollama Go template, "{{ .Prompt }}", does not)."""
    try:
        BoundedSandbox().from_string(template)
    except TemplateError as error:
        go = "{{ ." in template or "{{- ." in template or "{{ end" in template
        raise ValueError(("This looks like an Ollama Go template, which this server cannot "
                          "render yet; give the model's Jinja chat template" if go else
                          "The template is not a valid Jinja chat template") +
                         f" ({error}).") from None


def renderer_for(metadata: dict):
    """(format name, render) for a file of a family rendered in code that carries no
    template of its own; None otherwise."""
    if template_for(metadata) is not None:
        return None
    return RENDERERS.get(metadata.get("general.architecture", ""))


def render(template: str, messages: list[dict], bos: str = "", eos: str = "",
           add_generation_prompt: bool = True, tools: list | None = None, **extra) -> str:
    """The prompt of messages in template, as Hugging Face renders chat templates: a jinja2
    sandbox (bounded in time and size: sandbox.py) with trim_blocks, lstrip_blocks and loop
    controls, tojson without ASCII escapes, raise_exception and strftime_now; tools and
    extra keyword arguments (enable_thinking, ...) passed through, all as copies (a template
    may change what it is given), and READ_UNSET's variables to a template that reads them;
    a tool without a description has an empty one.
    Tool call arguments stay objects, unless the template fails on them and renders with
    them as JSON text (functionary's concatenate them)."""
    check_messages(messages)
    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    env.filters["tojson"] = _tojson
    context = dict(extra, add_generation_prompt=add_generation_prompt, bos_token=bos,
                   eos_token=eos, tools=[_described(t) for t in tools] if tools else None)
    try:
        parsed = env.parse(template)                 # once: compiled, and read for names
        compiled = env.from_string(parsed)
        for name in meta.find_undeclared_variables(parsed):
            if name in READ_UNSET and name not in context:
                context[name] = READ_UNSET[name](tools)
        try:
            return render_bounded(compiled, **copy.deepcopy(dict(context, messages=messages)))
        except Exception as error:          # a template's own code may raise anything
            as_text = _arguments_as_text(messages)
            if as_text is None or isinstance(error, TemplateLimit):
                raise
            return render_bounded(compiled, **copy.deepcopy(dict(context, messages=as_text)))
    except Exception as error:
        raise ValueError(f"The chat template failed: {str(error).rstrip('.')}.") from error


def _described(tool):
    """A tool whose function has no description with an empty one: OpenAI's is optional,
    and templates such as gpt-oss's read it."""
    function = tool.get("function") if isinstance(tool, dict) else None
    if isinstance(function, dict) and "description" not in function:
        return dict(tool, function=dict(function, description=""))
    return tool


def _arguments_as_text(messages: list[dict]) -> list[dict] | None:
    """messages with their tool calls' arguments as JSON text; None where none are objects."""
    changed, found = [], False
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not calls:
            changed.append(message)
            continue
        texts = []
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), dict):
                found = True
                call = dict(call, function=dict(function,
                                                arguments=json.dumps(function["arguments"],
                                                                     ensure_ascii=False)))
            texts.append(call)
        changed.append(dict(message, tool_calls=texts))
    return changed if found else None


def with_image_tags(messages: list[dict], spaced: bool = False) -> tuple[list[dict], list]:
    """Messages whose images (and audio, after them) are [img-N] tags, and the items in that
    order (N counting the items of all messages), as Ollama writes them: each replaces an
    "[img]" the content holds, in order, and the rest go before the content. spaced: as
    Ollama's renderers in code write them (model/renderers/image_tags.go): a space between
    the tags and content that starts with none, and content that already names its tags
    ("[img-") left as it is."""
    tagged: list[dict] = []
    images: list = []
    for message in messages:
        if not isinstance(message, dict) or not (message.get("images") or message.get("audio")):
            tagged.append(message)
            continue
        attached = []
        for key in ("images", "audio"):
            items = message.get(key) or []
            if not isinstance(items, (list, tuple)):
                raise ValueError(f"A message's {key} must be a list, not "
                                 f"{type(items).__name__}.")
            attached += list(items)
        rest = {k: v for k, v in message.items() if k not in ("images", "audio")}
        content = rest.get("content") or ""
        if not (spaced and "[img-" in content):
            prefix = ""
            for i in range(len(attached)):
                tag = f"[img-{len(images) + i}]"
                if "[img]" in content:
                    content = content.replace("[img]", tag, 1)
                else:
                    prefix += tag
            if spaced and prefix and content and not content[0].isspace():
                prefix += " "
            content = prefix + content
        images += attached
        tagged.append(dict(rest, content=content))
    return tagged, images
