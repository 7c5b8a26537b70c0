"""Generation, chat and embeddings as Ollama's API defines them, independent of the wire:
each opens a stream of Ollama-shaped chunks (the native routes write them as NDJSON, the
OpenAI routes translate them). Errors before the first chunk are ServeErrors with Ollama's
status; an error after it is a last chunk {"error": ...}."""

from __future__ import annotations

import asyncio
import math
import time

from ...tokenizer.template import with_image_tags
from ..ollama.bodies import (ChatRequest, EmbedRequest, GenerateRequest, Generation, Loading,
                             NamedTool)
from .chunks import Call, now, reply_chunks
from ..library.entry import Entry
from ..web.errors import ServeError
from ..library.store import Library, ModelNotFound
from .options import Settings, layered, load_choice, think_level
from ...protocol import CompletionRequest, Image
from ...sample.grammar import MAX_TEXT as MAX_GRAMMAR
from ..formats import forced_call_grammar, make_extractor
from ..formats.prompts import Prompt, chat_prompt, generate_prompt, reply_format
from .scheduler import Busy, Loaded, Scheduler
from .stream import LateStream, Reply, Stream
from .runners import RunnerError

SHUTTING_DOWN = "The server is shutting down; this reply was not finished."
CONTEXT_EXCEEDED = "context_length_exceeded"     # OpenAI's code for a prompt that does not fit


class Service:
    def __init__(self, library: Library, scheduler: Scheduler, settings: Settings):
        self.library, self.scheduler, self.settings = library, scheduler, settings
        self.stopping = False

    async def shut_down(self) -> None:
        """End every reply in progress with an error and stop the runners."""
        self.stopping = True
        await self.scheduler.stop()

    def _failed(self, error: RunnerError) -> str:
        return SHUTTING_DOWN if self.stopping else str(error)

    def _refusal(self, error: RunnerError) -> ServeError:
        """A runner's failure: its own 4xx/5xx, else 500; 503 while the server shuts
        down."""
        status = 503 if self.stopping else \
            error.status if 400 <= error.status < 600 else 500
        code = CONTEXT_EXCEEDED if "truncation is off" in str(error) else None
        return ServeError(status, self._failed(error), code)

    async def entry(self, name: str) -> Entry:
        """The named model, its file's header read off the event loop (once per file)."""
        if not name:
            raise ServeError(400, "model is required")
        try:
            return await asyncio.to_thread(self._read_entry, name)
        except ModelNotFound as error:
            raise ServeError(404, str(error)) from None
        except ValueError as error:                     # not a GGUF file, a corrupt header
            raise ServeError(400, f'model "{name}" cannot be read: {error}') from None

    def _read_entry(self, name: str) -> Entry:
        entry = self.library.get(name)
        entry.capabilities()                            # parses the headers it needs
        return entry

    def _options(self, entry: Entry, options: dict):
        """(the runner's generation options, the load choice) for a request's options over
        the model's parameters."""
        try:
            generation, load, _ = layered(entry.parameters, options)
            return generation, load_choice(load, self.settings, entry.context_length)
        except ValueError as error:
            raise ServeError(400, str(error)) from None

    async def _lease(self, entry: Entry, choice, keep_alive) -> Loaded:
        try:
            return await self.scheduler.acquire(entry, choice, keep_alive)
        except Busy as error:
            raise ServeError(503, str(error)) from None
        except RunnerError as error:
            raise self._refusal(error) from None

    async def load_only(self, request: Loading, chat: bool) -> dict:
        """An empty prompt or messages: load the model (keep_alive 0: unload it)."""
        entry = await self.entry(request.model)
        _, choice = self._options(entry, request.given_options())
        keep_alive = request.keep_alive
        if keep_alive == 0:
            await self.scheduler.unload(entry.name)
            reason = "unload"
        else:
            self.scheduler.release(await self._lease(entry, choice, keep_alive))
            reason = "load"
        done = {"model": request.model, "created_at": now(), "done": True,
                "done_reason": reason}
        if chat:
            done["message"] = {"role": "assistant", "content": ""}
        else:
            done["response"] = ""
        return done

    # -- generate and chat ----------------------------------------------------------------

    async def generate(self, request: GenerateRequest, tokens: list[int] | None = None,
                       early: bool = False) -> Reply:
        """tokens: token ids the prompt starts with (also in raw mode: OpenAI's token-id
        prompts)."""
        arrived = time.perf_counter_ns()
        entry = await self.entry(request.model)
        if "completion" not in entry.capabilities():
            raise ServeError(400, f'"{request.model}" does not support generate')
        if request.suffix and "insert" not in entry.capabilities():
            raise ServeError(400, f'"{request.model}" does not support insert')
        images = self._images(entry, request.images)
        prompt_text = request.prompt
        if images and not request.raw:           # in the user's turn, as Ollama puts them
            prompt_text = "".join(f"[img-{i}]" for i in range(len(images))) + prompt_text
        try:
            text = await asyncio.to_thread(generate_prompt, entry, prompt_text,
                                           request.system, request.template, request.raw,
                                           request.suffix)
        except ValueError as error:
            raise ServeError(400, str(error)) from None
        think = self._think(entry, request.think)
        prompt = Prompt(text, reply_format(entry), False)
        extractor = make_extractor(prompt.format, thinking=think != "off") if think else None
        body = CompletionRequest(prompt=text, images=_protocol_images(images))
        call = Call(entry, body, extractor, keep_context=not request.raw, prompt_text=text)
        return await self._opened(call, request, arrived, early,
                                  context=request.context if tokens is None else tokens)

    async def chat(self, request: ChatRequest, early: bool = False,
                   budget: int | None = None) -> Reply:
        """The reply's stream; early: at once, the model loading and the prompt evaluated as
        it is read (their failures then come as its error chunk), so that a streamed
        response's headers need not wait for them. budget: at most this many tokens of
        thinking (Anthropic's budget_tokens, OpenAI's effort; Ollama's chat has none)."""
        arrived = time.perf_counter_ns()
        return await self._opened(await self._chat_call(request, budget), request, arrived,
                                  early)

    async def _opened(self, call: Call, request: Generation, arrived: int, early: bool,
                      context: list[int] | None = None) -> Reply:
        options = self._options(call.entry, request.given_options())   # refused now
        opening = self._open(call, request, arrived, context, options)
        if not early:
            return await opening
        return LateStream(opening, len(call.body.prompt) // 4)

    async def prompt_tokens(self, request: ChatRequest) -> int:
        """How many tokens the chat's prompt takes (its text; the model loads to count)."""
        call = await self._chat_call(request)
        loaded = await self._lease(call.entry, self._options(call.entry,
                                                             request.given_options())[1],
                                   request.keep_alive)
        try:
            return len(await loaded.runner.tokenize(call.body.prompt))
        finally:
            self.scheduler.release(loaded)

    async def _chat_call(self, request: ChatRequest, budget: int | None = None) -> Call:
        entry = await self.entry(request.model)
        if "completion" not in entry.capabilities():
            raise ServeError(400, f'"{request.model}" does not support chat')
        tools = request.tool_dicts()
        if tools and "tools" not in entry.capabilities():
            raise ServeError(400, f'"{request.model}" does not support tools')
        for message in request.messages:
            self._images(entry, message.images)
        history = [m.for_template() for m in request.messages]
        # as Ollama: the model's messages first, and its system prompt unless the chat has one
        history = list(entry.messages or []) + history
        if entry.system and not (history and history[0].get("role") == "system"):
            history.insert(0, {"role": "system", "content": entry.system})
        try:
            messages, images = with_image_tags(history,
                                               spaced=entry.named_renderer() is not None)
        except ValueError as error:
            raise ServeError(400, str(error)) from None
        think = self._think(entry, request.think)
        try:
            prompt = await asyncio.to_thread(chat_prompt, entry, messages, tools, think)
        except ValueError as error:
            raise ServeError(400, str(error)) from None
        extractor = make_extractor(prompt.format, tools=tools or False,
                                   thinking=think != "off", start_thinking=prompt.start_thinking)
        body = CompletionRequest(prompt=prompt.text, images=_protocol_images(images))
        if think not in (None, "off"):
            _bound_thinking(body, prompt, request.format, budget)
        return Call(entry, body, extractor, chat=True,
                    extra={"tools": tools, "tool_choice": request.tool_choice,
                           "messages": messages, "think": think,
                           "start_thinking": prompt.start_thinking})

    def _think(self, entry: Entry, think) -> str | None:
        try:
            level = think_level(think)
        except ValueError as error:
            raise ServeError(400, str(error)) from None
        capable = "thinking" in entry.capabilities()
        if level not in (None, "off") and not capable:
            raise ServeError(400, f'"{entry.name}" does not support thinking')
        if level is None and capable:
            return "medium"
        return level

    def _images(self, entry: Entry, images: list[str] | None) -> list[str]:
        """A request's images (base64 strings), refused for a model that reads none."""
        if images and not {"vision", "audio"} & set(entry.capabilities()):
            raise ServeError(400, f'"{entry.name}" does not support images')
        return images or []

    async def _open(self, call: Call, request: Generation, arrived: int,
                    context: list[int] | None, options) -> Stream:
        generation, choice = options
        top = request.top_logprobs
        loading = time.perf_counter_ns()
        loaded = await self._lease(call.entry, choice, request.keep_alive)
        load_duration = time.perf_counter_ns() - loading
        try:
            runner = loaded.runner
            if context:
                call.body.prompt = await runner.detokenize(list(context)) + call.body.prompt
            if call.chat and request.truncate:
                await self._fit_messages(call, loaded)
            call.body = call.body.model_copy(update=dict(
                options=generation, format=request.format or None, shift=request.shift,
                truncate=request.truncate, logprobs=request.logprobs or top > 0,
                top_logprobs=top))
            await self._force_call(call, runner)
            events = runner.completion(call.body)
            await anext(events)           # ACCEPTED: the runner's refusals raise here
        except RunnerError as error:
            self.scheduler.release(loaded)
            raise self._refusal(error) from None
        except BaseException:
            self.scheduler.release(loaded)
            raise
        chunks = reply_chunks(call, request.model, events, runner,
                              arrived, load_duration, self._refusal)
        async def count() -> int:
            return len(await runner.tokenize(call.body.prompt))

        return Stream(chunks, lambda: self.scheduler.release(loaded), events, count)

    async def _fit_messages(self, call: Call, loaded: Loaded) -> None:
        """As Ollama truncates a chat: drop the oldest messages (never a system message nor
        the last one; a call's results with it) until the prompt fits the context."""
        messages = list(call.extra["messages"])
        limit = loaded.choice.num_ctx
        while len(await loaded.runner.tokenize(call.body.prompt)) > limit:
            droppable = [i for i, m in enumerate(messages[:-1]) if m["role"] != "system"]
            if not droppable:
                return                     # the runner truncates what is left, or refuses
            first = end = droppable[0]
            while end + 1 < len(messages) - 1 and messages[end + 1]["role"] == "tool":
                end += 1                   # a tool's result goes with the call it answers
            del messages[first:end + 1]
            try:
                call.body.prompt = (await asyncio.to_thread(
                    chat_prompt, call.entry, messages, call.extra["tools"],
                    call.extra["think"])).text
            except ValueError as error:
                raise ServeError(400, f"The conversation does not fit the context, and "
                                      f"shortened it cannot be rendered: {error}") from None
            call.body.images = [image for image in call.body.images or []
                                if f"[img-{image.id}]" in call.body.prompt] or None

    async def _force_call(self, call: Call, runner) -> None:
        """OpenAI's tool_choice "required" (or a named function): a grammar makes the reply a
        call, written as the model's format writes calls (after closing the think block the
        prompt opened, if it did)."""
        choice, tools = call.extra.get("tool_choice"), call.extra.get("tools")
        if not tools or choice in (None, "auto", "none") or call.extractor is None:
            return
        if isinstance(choice, NamedTool):
            tools = [t for t in tools if t["function"]["name"] == choice.function.name]
        tags = {}
        fmt = call.extractor.format
        for tag in fmt.tags:
            ids = await runner.tokenize(tag)
            tags[tag] = ids[0] if len(ids) == 1 else None
        grammar = forced_call_grammar(fmt, tools, tags.get,
                                      in_thinking=call.extra.get("start_thinking", False))
        if grammar is not None and len(grammar) > MAX_GRAMMAR:
            raise ServeError(400, f"The tools' parameter schemas make a grammar of "
                                  f"{len(grammar)} characters to force a call (tool_choice); "
                                  f"at most {MAX_GRAMMAR} are enforced.")
        if grammar is not None:
            # the grammar writes the reply, a call from its first token: no thinking to bound
            if call.body.thinking_budget is not None and not call.body.format:
                call.body.think_tags, call.body.think_opened = None, False
            call.body.grammar, call.body.format = grammar, None
            call.body.thinking_budget = None

    # -- embeddings ---------------------------------------------------------------------

    async def embed(self, request: EmbedRequest, normalize: bool = True, inputs=None
                    ) -> tuple[list, int, int]:
        """(vectors, prompt tokens, load duration) of the request's input (or of inputs:
        texts and lists of token ids)."""
        entry = await self.entry(request.model)
        dimensions = request.dimensions
        _, choice = self._options(entry, request.given_options())
        loading = time.perf_counter_ns()
        loaded = await self._lease(entry, choice, request.keep_alive)
        load_duration = time.perf_counter_ns() - loading
        try:
            vectors, count = [], 0
            for text in request.texts() if inputs is None else inputs:
                text = await self._fit_context(loaded, text, request.truncate)
                try:
                    result = await loaded.runner.embedding(text)
                except RunnerError as error:
                    status = 400 if error.status in (400, 501) else 500
                    raise ServeError(status, str(error)) from None
                vector = result["embedding"][:dimensions] if dimensions else result["embedding"]
                if normalize:
                    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
                    vector = [v / norm for v in vector]
                vectors.append(vector)
                count += result["prompt_eval_count"]
            return vectors, count, load_duration
        finally:
            self.scheduler.release(loaded)

    async def _fit_context(self, loaded: Loaded, text, truncate: bool):
        limit = loaded.choice.num_ctx
        if isinstance(text, list):                  # token ids: as given, or refused
            if len(text) > limit:
                raise ServeError(400, f"The input has {len(text)} tokens; the context holds "
                                      f"{limit}.")
            return text
        tokens = await loaded.runner.tokenize(text, parse_special=False)
        if len(tokens) + 2 <= limit:
            return text
        if not truncate:
            raise ServeError(400, f"the input length ({len(tokens)} tokens) exceeds the "
                                  f"context length ({limit})", CONTEXT_EXCEEDED)
        return await loaded.runner.detokenize(tokens[:max(1, limit - 2)])


def _bound_thinking(body: CompletionRequest, prompt: Prompt, format, budget: int | None
                    ) -> None:
    """What the runner is told of a thinking reply's tags: a format holds what follows them
    (harmony's: what follows its final channel's opening); a budget forces the close tag
    once that many tokens were thought. Families whose effort is their own (harmony,
    rendered in code) write no think tags: no budget is forced on them."""
    fmt = prompt.format
    tags = fmt.thinking_tags
    if tags is None:
        return
    opened = prompt.start_thinking or fmt.answer_after is not None
    if format:                                             # think, then the format
        body.think_tags, body.think_opened = list(tags), opened
    if budget is not None and fmt.think is not None and fmt.answer_after is None:
        body.think_tags, body.think_opened = list(fmt.think), opened
        body.thinking_budget = budget


def _protocol_images(images: list[str]) -> list[Image] | None:
    """The runner protocol's Images: base64 data and the id its [img-ID] tag names."""
    return [Image(data=data, id=i) for i, data in enumerate(images)] or None

