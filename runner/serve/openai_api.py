"""OpenAI's API over the same service: /v1/chat/completions, /v1/completions, /v1/embeddings,
/v1/models. Each request becomes a native one and each native chunk an OpenAI one (SSE
`data:` lines ending with `[DONE]` when streaming); errors take OpenAI's shape."""

from __future__ import annotations

import base64
import json
import secrets
import struct
import time

from typing import Annotated

from fastapi import APIRouter, Request

from .bodies import ChatRequest, EmbedRequest, GenerateRequest, Message, Options
from .openai_bodies import (EFFORT, AudioPart, ChatCompletionRequest, CompletionRequest,
                            ImagePart, OpenAIEmbeddingsRequest, OpenAIMessage, ResponseFormat,
                            Sampling, TextPart)
from .reading import Served, body, documented
from .replies import StreamReply, folded
from .service import ServeError

FINGERPRINT = "fp_ollama"


def error_body(status: int, message: str) -> dict:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _options(body: Sampling, limit: int | None) -> Options:
    """OpenAI's sampling fields as Ollama options (temperature and top_p default to 1)."""
    stop = [body.stop] if isinstance(body.stop, str) else body.stop
    given = {"temperature": 1.0 if body.temperature is None else body.temperature,
             "top_p": 1.0 if body.top_p is None else body.top_p, "seed": body.seed,
             "frequency_penalty": body.frequency_penalty,
             "presence_penalty": body.presence_penalty, "num_predict": limit, "stop": stop}
    return Options(**{k: v for k, v in given.items() if v is not None})


def _format(response_format: ResponseFormat | None):
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return "json"
    if response_format.json_schema is None:
        raise ServeError(400, "response_format json_schema needs a schema object")
    return response_format.json_schema.schema_


def _think(body: ChatCompletionRequest):
    effort = body.reasoning_effort or (body.reasoning.effort if body.reasoning else None)
    return None if effort is None else EFFORT[effort]


def _messages(messages: list[OpenAIMessage]) -> list[Message]:
    """OpenAI messages as native ones: content parts split, tool call arguments parsed,
    tool results named, developer as system, reasoning as thinking."""
    names, found = {}, []
    for message in messages:
        base = {"role": "system" if message.role == "developer" else message.role}
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
            found += [Message(**base, **_part(part)) for part in message.content]
        else:
            found.append(Message(**base, content=message.content or ""))
    return found


def _part(part: TextPart | ImagePart | AudioPart) -> dict:
    if isinstance(part, TextPart):
        return {"content": part.text}
    if isinstance(part, ImagePart):
        url = part.image_url.url
        if not url.startswith("data:image/"):
            raise ServeError(400, "only data:image/...;base64 image URLs are supported")
        return {"content": "", "images": [url.split(",", 1)[-1]]}
    return {"content": "", "images": [part.input_audio.data]}


def _tool_calls(calls: list[dict]) -> list[dict]:
    return [{"id": c["id"], "index": c["function"]["index"], "type": "function",
             "function": {"name": c["function"]["name"],
                          "arguments": json.dumps(c["function"]["arguments"])}} for c in calls]


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
        first, finish = True, None
        async for chunk in stream:
            if "error" in chunk:
                yield f"data: {json.dumps(error_body(500, chunk['error']))}\n\n"
                break
            for choice in convert(chunk, first):
                first = False
                yield "data: " + json.dumps({"id": ident, "object": kind, "created": created,
                                             "model": model, "system_fingerprint": FINGERPRINT,
                                             "choices": [choice]}) + "\n\n"
            if chunk.get("done"):
                finish = chunk
        if finish is not None and include_usage:
            yield "data: " + json.dumps({"id": ident, "object": kind, "created": created,
                                         "model": model, "system_fingerprint": FINGERPRINT,
                                         "choices": [], "usage": _usage(finish)}) + "\n\n"
        yield "data: [DONE]\n\n"

    return StreamReply(stream, events(), "text/event-stream")


class ChatChunks:
    """Native chunks as chat.completion.chunk choices: the role on the first delta, then
    reasoning, tool calls and content, and the finish reason on the last."""

    def __init__(self):
        self.calls_seen = []

    def __call__(self, chunk: dict, first: bool) -> list[dict]:
        message, choices = chunk.get("message", {}), []
        pending = {"role": "assistant"} if first else {}

        def add(delta, **extra):
            nonlocal pending
            choices.append({"index": 0, "delta": {**pending, **delta}, "finish_reason": None,
                            **extra})
            pending = {}

        if message.get("thinking"):
            add({"reasoning": message["thinking"]})
        if message.get("tool_calls"):
            self.calls_seen.extend(message["tool_calls"])
            add({"tool_calls": _tool_calls(message["tool_calls"])})
        if message.get("content") or pending:
            extra = {"logprobs": _logprobs(chunk["logprobs"])} if chunk.get("logprobs") else {}
            add({"content": message.get("content", "")}, **extra)
        if chunk.get("done"):
            reason = "tool_calls" if self.calls_seen else chunk.get("done_reason", "stop")
            choices.append({"index": 0, "delta": {}, "finish_reason": reason})
        return choices


def _completion_choices(chunk: dict, first: bool) -> list[dict]:
    choice = {"text": chunk.get("response", ""), "index": 0,
              "finish_reason": chunk.get("done_reason") if chunk.get("done") else None}
    return [choice] if choice["text"] or chunk.get("done") else []


api = APIRouter()
ChatCompletionBody = Annotated[ChatCompletionRequest, body(ChatCompletionRequest)]
CompletionBody = Annotated[CompletionRequest, body(CompletionRequest)]
EmbeddingsBody = Annotated[OpenAIEmbeddingsRequest, body(OpenAIEmbeddingsRequest)]


@api.post("/v1/chat/completions", openapi_extra=documented(ChatCompletionRequest))
async def chat_completions(request: ChatCompletionBody, service: Served, http: Request):
    limit = request.max_completion_tokens if request.max_completion_tokens is not None \
        else request.max_tokens
    native = ChatRequest(model=request.model, messages=_messages(request.messages),
                         options=_options(request, limit), format=_format(request.response_format),
                         stream=False, tools=request.tools, tool_choice=request.tool_choice,
                         think=_think(request), logprobs=request.logprobs,
                         top_logprobs=request.top_logprobs or 0)
    ident = f"chatcmpl-{secrets.randbelow(1000)}"
    stream = await service.chat(native)
    if request.stream:
        return _sse(stream, ChatChunks(), request.include_usage(), request.model,
                    "chat.completion.chunk", ident)
    done = await folded(stream, http)
    message = done["message"]
    reply = {"role": "assistant", "content": message.get("content", "")}
    if message.get("thinking"):
        reply["reasoning"] = message["thinking"]
    if message.get("tool_calls"):
        reply["tool_calls"] = _tool_calls(message["tool_calls"])
    choice = {"index": 0, "message": reply, "finish_reason":
              "tool_calls" if message.get("tool_calls") else done.get("done_reason")}
    if done.get("logprobs"):
        choice["logprobs"] = _logprobs(done["logprobs"])
    return {"id": ident, "object": "chat.completion", "created": int(time.time()),
            "model": request.model, "system_fingerprint": FINGERPRINT, "choices": [choice],
            "usage": _usage(done)}


@api.post("/v1/completions", openapi_extra=documented(CompletionRequest))
async def completions(request: CompletionBody, service: Served, http: Request):
    top = request.logprobs
    native = GenerateRequest(model=request.model, prompt=request.prompt,
                             suffix=request.suffix or "", logprobs=bool(top),
                             options=_options(request, request.max_tokens),
                             top_logprobs=top or 0)
    ident = f"cmpl-{secrets.randbelow(1000)}"
    stream = await service.generate(native)
    if request.stream:
        return _sse(stream, _completion_choices, request.include_usage(), request.model,
                    "text_completion", ident)
    done = await folded(stream, http)
    return {"id": ident, "object": "text_completion", "created": int(time.time()),
            "model": request.model, "system_fingerprint": FINGERPRINT,
            "choices": [{"text": done.get("response", ""), "index": 0, "logprobs": None,
                         "finish_reason": done.get("done_reason")}],
            "usage": _usage(done)}


@api.post("/v1/embeddings", openapi_extra=documented(OpenAIEmbeddingsRequest))
async def embeddings(request: EmbeddingsBody, service: Served):
    vectors, count, _ = await service.embed(EmbedRequest(model=request.model,
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
