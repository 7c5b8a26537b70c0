"""OpenAI's API over the same service: /v1/chat/completions, /v1/completions, /v1/embeddings,
/v1/models (the first three also without /v1, as llama-server and vLLM answer them, for
clients given a base URL without it). Each request becomes a native one and each native
chunk an OpenAI one (SSE `data:` lines ending with `[DONE]` when streaming); errors take
OpenAI's shape."""

from __future__ import annotations

import base64
import json
import secrets
import struct
import time

from typing import Annotated, Any

from fastapi import APIRouter, Request

from ..ollama.bodies import ChatRequest, EmbedRequest, GenerateRequest, Message, Options
from .bodies import (DATA_URLS_ONLY, EFFORT, AudioPart, ChatCompletionRequest,
                            CompletionRequest, ImagePart, OpenAIEmbeddingsRequest,
                            OpenAIMessage, ResponseFormat, Sampling, TextPart, image_data)
from ..web.reading import Served, body, documented
from .choices import Choices, completion_logprobs
from ..web.replies import KEEPALIVE, StreamReply, folded_each, keepalive_seconds, kept_alive
from ..service.core import ServeError
from ..service.options import effort_budget

FINGERPRINT = "fp_ollama"
UNVERSIONED = ("/chat/completions", "/completions", "/embeddings")   # aliases without /v1


def error_body(status: int, message: str, code: str | None = None) -> dict:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _options(body: Sampling, limit: int | None) -> Options:
    """OpenAI's sampling fields as Ollama options (temperature and top_p default to 1)."""
    stop = [body.stop] if isinstance(body.stop, str) else body.stop
    given = {"temperature": 1.0 if body.temperature is None else body.temperature,
             "top_p": 1.0 if body.top_p is None else body.top_p, "seed": body.seed,
             "frequency_penalty": body.frequency_penalty,
             "presence_penalty": body.presence_penalty, "num_predict": limit, "stop": stop,
             "logit_bias": body.logit_bias}
    return Options.model_validate({k: v for k, v in given.items() if v is not None})


def _format(response_format: ResponseFormat | None):
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return "json"
    if response_format.json_schema is None:
        raise ServeError(400, "response_format json_schema needs a schema object")
    return response_format.json_schema.schema_


def _effort(body: ChatCompletionRequest) -> str | None:
    return body.reasoning_effort or (body.reasoning.effort if body.reasoning else None)


def _think(body: ChatCompletionRequest):
    effort = _effort(body)
    return None if effort is None else EFFORT[effort]


def _messages(messages: list[OpenAIMessage]) -> list[Message]:
    """OpenAI messages as native ones: content parts split, tool call arguments parsed,
    tool results named, developer as system, reasoning as thinking."""
    names: dict[str | None, str] = {}                # call id -> its function's name
    found: list[Message] = []
    for message in messages:
        base: dict[str, Any] = {"role": "system" if message.role == "developer" else
                                message.role}
        if message.reasoning:
            base["thinking"] = message.reasoning
        calls = []
        for call in message.tool_calls or []:
            arguments = call.function.arguments
            try:
                arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
            except json.JSONDecodeError:
                raise ServeError(400, f"invalid tool call arguments: {arguments!r}") from None
            if not isinstance(arguments, dict):
                raise ServeError(400, f"tool call arguments must be a JSON object, not "
                                      f"{arguments!r}")
            names[call.id] = call.function.name
            calls.append({"id": call.id, "function": {"name": call.function.name,
                                                      "arguments": arguments}})
        if calls:
            base["tool_calls"] = calls
        if message.role == "tool":
            base["tool_name"] = message.name or names.get(message.tool_call_id, "")
            base["tool_call_id"] = message.tool_call_id
        if isinstance(message.content, list):
            found += [Message.model_validate({**base, **_part(part)})
                      for part in message.content]
        else:
            found.append(Message.model_validate({**base, "content": message.content or ""}))
    return found


def _part(part: TextPart | ImagePart | AudioPart) -> dict:
    if isinstance(part, TextPart):
        return {"content": part.text}
    if isinstance(part, ImagePart):
        data = image_data(part.image_url.url)
        if data is None:
            raise ServeError(400, DATA_URLS_ONLY)
        return {"content": "", "images": [data]}
    return {"content": "", "images": [part.input_audio.data]}


def _tool_calls(calls: list[dict]) -> list[dict]:
    """Calls as OpenAI's; a call the length cut keeps its arguments as the model wrote them
    (the finish reason, "length", says it is unfinished)."""
    return [{"id": c["id"], "index": c["function"]["index"], "type": "function",
             "function": {"name": c["function"]["name"],
                          "arguments": c["function"]["arguments"] if c.get("cut") else
                          json.dumps(c["function"]["arguments"])}} for c in calls]


def _finish_reason(done: dict, calls: bool) -> str:
    """tool_calls where the reply called tools and was not cut; else why it ended."""
    reason = done.get("done_reason", "stop")
    return "tool_calls" if calls and reason != "length" else reason


def _logprobs(entries: list[dict]) -> dict:
    return {"content": [{"token": e["token"], "logprob": e["logprob"], "bytes": e["bytes"],
                         "top_logprobs": [{"token": t["token"], "logprob": t["logprob"],
                                           "bytes": t["bytes"]} for t in e["top_logprobs"]]}
                        for e in entries]}


def _usage(done: dict) -> dict:
    prompt, completion = done.get("prompt_eval_count", 0), done.get("eval_count", 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": done.get("prompt_cached_count", 0)}}


def _sse(stream, convert, include_usage: bool, model: str, kind: str, ident: str):
    created = int(time.time())

    async def events():
        usage = None
        async for chunk in kept_alive(stream, keepalive_seconds()):
            if chunk is None:                      # nothing yet: the prompt is being read
                yield KEEPALIVE
                continue
            if "error" in chunk:
                body = error_body(chunk.get("status", 500), chunk["error"])
                yield f"data: {json.dumps(body)}\n\n"
                break
            for choice in convert(chunk):
                yield "data: " + json.dumps({"id": ident, "object": kind, "created": created,
                                             "model": model, "system_fingerprint": FINGERPRINT,
                                             "choices": [choice]}) + "\n\n"
            if chunk.get("done"):
                usage = _added(usage, _usage(chunk))
        if usage is not None and include_usage:
            yield "data: " + json.dumps({"id": ident, "object": kind, "created": created,
                                         "model": model, "system_fingerprint": FINGERPRINT,
                                         "choices": [], "usage": usage}) + "\n\n"
        yield "data: [DONE]\n\n"

    return StreamReply(stream, events(), "text/event-stream")


class ChatChunks:
    """Native chunks as chat.completion.chunk choices: the role on each choice's first
    delta, then reasoning, tool calls and content, and the finish reason on its last."""

    def __init__(self):
        self.calls_seen, self.started = set(), set()      # choice indexes

    def __call__(self, chunk: dict) -> list[dict]:
        message, choices, index = chunk.get("message", {}), [], chunk.get("index", 0)
        pending = {} if index in self.started else {"role": "assistant"}
        self.started.add(index)

        def add(delta, **extra):
            nonlocal pending
            choices.append({"index": index, "delta": {**pending, **delta},
                            "finish_reason": None, **extra})
            pending = {}

        if message.get("thinking"):
            add({"reasoning": message["thinking"]})
        if message.get("tool_calls"):
            self.calls_seen.add(index)
            add({"tool_calls": _tool_calls(message["tool_calls"])})
        if message.get("content") or pending:
            extra = {"logprobs": _logprobs(chunk["logprobs"])} if chunk.get("logprobs") else {}
            add({"content": message.get("content", "")}, **extra)
        if chunk.get("done"):
            reason = _finish_reason(chunk, index in self.calls_seen)
            choices.append({"index": index, "delta": {}, "finish_reason": reason})
        return choices


class Completions:
    """Native chunks as text_completion choices: each choice's echoed prompt first, its
    tokens' logprobs (the legacy shape) with their text."""

    def __init__(self, echoes: list[str], top: int | None):
        self.echoes, self.top = echoes, top
        self.offsets: dict[int, int] = {}

    def __call__(self, chunk: dict) -> list[dict]:
        index = chunk.get("index", 0)
        text = chunk.get("response", "")
        if index not in self.offsets:
            text = self.echoes[index] + text
            self.offsets[index] = len(self.echoes[index])
        choice = {"text": text, "index": index, "logprobs": None,
                  "finish_reason": chunk.get("done_reason") if chunk.get("done") else None}
        if self.top is not None and chunk.get("logprobs"):
            choice["logprobs"] = completion_logprobs(chunk["logprobs"], self.offsets[index])
            self.offsets[index] += sum(len(e["token"]) for e in chunk["logprobs"])
        return [choice] if choice["text"] or chunk.get("done") else []


api = APIRouter()
ChatCompletionBody = Annotated[ChatCompletionRequest, body(ChatCompletionRequest)]
CompletionBody = Annotated[CompletionRequest, body(CompletionRequest)]
EmbeddingsBody = Annotated[OpenAIEmbeddingsRequest, body(OpenAIEmbeddingsRequest)]


@api.post("/v1/chat/completions", openapi_extra=documented(ChatCompletionRequest))
@api.post("/chat/completions", include_in_schema=False)
async def chat_completions(request: ChatCompletionBody, service: Served, http: Request):
    limit = request.max_completion_tokens if request.max_completion_tokens is not None \
        else request.max_tokens
    native = ChatRequest(model=request.model, messages=_messages(request.messages),
                         options=_options(request, limit), format=_format(request.response_format),
                         stream=False, tools=request.tools, tool_choice=request.tool_choice,
                         think=_think(request), logprobs=request.logprobs,
                         top_logprobs=request.top_logprobs or 0, truncate=False)
    ident = f"chatcmpl-{secrets.randbelow(1000)}"
    early = request.stream                  # headers at once, the prompt read after
    budget = effort_budget(_effort(request))       # the effort as a thinking budget
    stream = Choices(await service.chat(native, early, budget),
                     [lambda: service.chat(native, early, budget)] * (request.n - 1))
    if request.stream:
        return _sse(stream, ChatChunks(), request.include_usage(), request.model,
                    "chat.completion.chunk", ident)
    choices, usage = [], None
    for done in await folded_each(stream, http):
        message = done["message"]
        reply = {"role": "assistant", "content": message.get("content", "")}
        if message.get("thinking"):
            reply["reasoning"] = message["thinking"]
        if message.get("tool_calls"):
            reply["tool_calls"] = _tool_calls(message["tool_calls"])
        choice = {"index": done["index"], "message": reply,
                  "finish_reason": _finish_reason(done, bool(message.get("tool_calls")))}
        if done.get("logprobs"):
            choice["logprobs"] = _logprobs(done["logprobs"])
        choices.append(choice)
        usage = _added(usage, _usage(done))
    return {"id": ident, "object": "chat.completion", "created": int(time.time()),
            "model": request.model, "system_fingerprint": FINGERPRINT, "choices": choices,
            "usage": usage}


@api.post("/v1/completions", openapi_extra=documented(CompletionRequest))
@api.post("/completions", include_in_schema=False)
async def completions(request: CompletionBody, service: Served, http: Request):
    """A raw continuation of each prompt (text or token ids), n times each."""
    top = request.logprobs
    if request.echo and (top is not None or not all(isinstance(p, str)
                                                      for p in request.prompts())):
        raise ServeError(400, "echo is supported for text prompts without logprobs (the "
                              "prompt's own logprobs are not computed)")

    def opener(prompt):
        text, tokens = (prompt, None) if isinstance(prompt, str) else ("", prompt)
        native = GenerateRequest(model=request.model, prompt=text, raw=not request.suffix,
                                 suffix=request.suffix or "", logprobs=top is not None,
                                 options=_options(request, request.max_tokens),
                                 top_logprobs=top or 0, truncate=False)
        return lambda: service.generate(native, tokens, early=request.stream)

    opens = [opener(prompt) for prompt in request.prompts() for _ in range(request.n)]
    echoes = [prompt if request.echo else "" for prompt in request.prompts()
              for _ in range(request.n)]
    ident = f"cmpl-{secrets.randbelow(1000)}"
    stream = Choices(await opens[0](), opens[1:])
    if request.stream:
        return _sse(stream, Completions(echoes, top), request.include_usage(),
                    request.model, "text_completion", ident)
    choices, usage = [], None
    for done in await folded_each(stream, http):
        echo = echoes[done["index"]]
        choices.append({"text": echo + done.get("response", ""), "index": done["index"],
                        "logprobs": completion_logprobs(done.get("logprobs", []), len(echo))
                        if top is not None else None,
                        "finish_reason": done.get("done_reason")})
        usage = _added(usage, _usage(done))
    return {"id": ident, "object": "text_completion", "created": int(time.time()),
            "model": request.model, "system_fingerprint": FINGERPRINT, "choices": choices,
            "usage": usage}


def _added(total: dict | None, usage: dict) -> dict:
    if total is None:
        return usage
    return {k: _added(total[k], v) if isinstance(v, dict) else total[k] + v
            for k, v in usage.items()}


@api.post("/v1/embeddings", openapi_extra=documented(OpenAIEmbeddingsRequest))
@api.post("/embeddings", include_in_schema=False)
async def embeddings(request: EmbeddingsBody, service: Served):
    vectors, count, _ = await service.embed(EmbedRequest(model=request.model, truncate=False,
                                                         dimensions=request.dimensions),
                                            inputs=request.inputs())
    base64_encoded = request.encoding_format == "base64"
    data = [{"object": "embedding", "index": i,
             "embedding": base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
             if base64_encoded else vector}
            for i, vector in enumerate(vectors)]
    return {"object": "list", "data": data, "model": request.model,
            "usage": {"prompt_tokens": count, "total_tokens": count}}


@api.get("/v1/models")
async def models(service: Served):
    return {"object": "list", "data": [_model(e) for e in service.library.list()]}


@api.get("/v1/models/{name:path}")
async def model(name: str, service: Served):
    return _model(await service.entry(name))


def _model(entry) -> dict:
    namespace = entry.name.split("/")[0] if "/" in entry.name else "library"
    return {"id": entry.name, "object": "model", "created": int(entry.path.stat().st_mtime),
            "owned_by": namespace}
