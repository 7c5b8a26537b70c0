"""OpenAI's API over the same service: /v1/chat/completions, /v1/completions, /v1/embeddings,
/v1/models. Each request becomes a native one and each native chunk an OpenAI one (SSE
`data:` lines ending with `[DONE]` when streaming); errors take OpenAI's shape."""

from __future__ import annotations

import base64
import json
import secrets
import struct
import time

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from .native import body_of, folded
from .schemas import documented
from .service import ServeError, Service

EFFORT = {"none": False, "minimal": "low", "low": "low", "medium": "medium", "high": "high",
          "max": "max", "xhigh": "max", "ultra": "max"}
FINGERPRINT = "fp_ollama"


def error_body(status: int, message: str) -> dict:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _options(body: dict) -> dict:
    """OpenAI's sampling fields as Ollama options (temperature and top_p default to 1)."""
    options = {"temperature": body.get("temperature", 1.0), "top_p": body.get("top_p", 1.0)}
    for field in ("seed", "frequency_penalty", "presence_penalty"):
        if body.get(field) is not None:
            options[field] = body[field]
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        options["num_predict"] = limit
    stop = body.get("stop")
    if stop is not None:
        options["stop"] = [stop] if isinstance(stop, str) else stop
    return {k: v for k, v in options.items() if v is not None}


def _format(body: dict):
    response_format = body.get("response_format") or {}
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_object":
        return "json"
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise ServeError(400, "response_format json_schema needs a schema object")
        return schema
    if kind not in (None, "text"):
        raise ServeError(400, f"response_format type {kind!r} is not supported")
    return None


def _think(body: dict):
    effort = body.get("reasoning_effort") or (body.get("reasoning") or {}).get("effort")
    if effort is None:
        return None
    if effort not in EFFORT:
        raise ServeError(400, f"reasoning_effort must be one of {', '.join(EFFORT)}")
    return EFFORT[effort]


def _messages(messages) -> list[dict]:
    """OpenAI messages as native ones: content parts split, tool call arguments parsed,
    tool results named, developer as system, reasoning as thinking."""
    if not isinstance(messages, list) or not messages:
        raise ServeError(400, "messages must be a non-empty list")
    names, found = {}, []
    for message in messages:
        if not isinstance(message, dict):
            raise ServeError(400, f"invalid message {message!r}")
        role = {"developer": "system"}.get(message.get("role"), message.get("role"))
        base = {"role": role}
        if message.get("reasoning"):
            base["thinking"] = message["reasoning"]
        calls = []
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            arguments = function.get("arguments") or "{}"
            try:
                arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
            except json.JSONDecodeError:
                raise ServeError(400, f"invalid tool call arguments: {arguments!r}") from None
            names[call.get("id")] = function.get("name")
            calls.append({"id": call.get("id"), "function": {"name": function.get("name"),
                                                             "arguments": arguments}})
        if calls:
            base["tool_calls"] = calls
        if role == "tool":
            base["tool_name"] = message.get("name") or names.get(message.get("tool_call_id"), "")
            base["tool_call_id"] = message.get("tool_call_id")
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                found.append(dict(base, **_part(part)))
        else:
            found.append(dict(base, content=content or ""))
    return found


def _part(part: dict) -> dict:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return {"content": part.get("text", "")}
    if kind == "image_url":
        url = (part.get("image_url") or {}).get("url", "")
        if not url.startswith("data:image/"):
            raise ServeError(400, "only data:image/...;base64 image URLs are supported")
        return {"content": "", "images": [url.split(",", 1)[-1]]}
    if kind == "input_audio":
        return {"content": "", "images": [(part.get("input_audio") or {}).get("data", "")]}
    raise ServeError(400, f"unsupported content part {kind!r}")


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
            "total_tokens": prompt + completion}


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

    return StreamingResponse(events(), media_type="text/event-stream")


def router(service: Service) -> APIRouter:
    api = APIRouter()

    @api.post("/v1/chat/completions", openapi_extra=documented("openai_chat"))
    async def chat_completions(request: Request):
        body = await body_of(request)
        native = {"model": body.get("model"), "messages": _messages(body.get("messages")),
                  "options": _options(body), "format": _format(body), "stream": False,
                  "tools": body.get("tools"), "tool_choice": body.get("tool_choice"),
                  "think": _think(body), "logprobs": bool(body.get("logprobs")),
                  "top_logprobs": body.get("top_logprobs") or 0}
        stream = await service.chat(native)
        ident = f"chatcmpl-{secrets.randbelow(1000)}"
        if body.get("stream"):
            calls_seen = []

            def convert(chunk, first):
                message, choices = chunk.get("message", {}), []
                pending = {"role": "assistant"} if first else {}

                def add(delta, **extra):
                    nonlocal pending
                    choices.append({"index": 0, "delta": {**pending, **delta},
                                    "finish_reason": None, **extra})
                    pending = {}

                if message.get("thinking"):
                    add({"reasoning": message["thinking"]})
                if message.get("tool_calls"):
                    calls_seen.extend(message["tool_calls"])
                    add({"tool_calls": _tool_calls(message["tool_calls"])})
                if message.get("content") or pending:
                    extra = {"logprobs": _logprobs(chunk["logprobs"])} \
                        if chunk.get("logprobs") else {}
                    add({"content": message.get("content", "")}, **extra)
                if chunk.get("done"):
                    reason = "tool_calls" if calls_seen else chunk.get("done_reason", "stop")
                    choices.append({"index": 0, "delta": {}, "finish_reason": reason})
                return choices

            include = bool((body.get("stream_options") or {}).get("include_usage"))
            return _sse(stream, convert, include, body["model"], "chat.completion.chunk", ident)
        done = await folded(stream)
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
                "model": body["model"], "system_fingerprint": FINGERPRINT, "choices": [choice],
                "usage": _usage(done)}

    @api.post("/v1/completions", openapi_extra=documented("openai_completion"))
    async def completions(request: Request):
        body = await body_of(request)
        if not isinstance(body.get("prompt"), str):
            raise ServeError(400, "prompt must be a string")
        top = body.get("logprobs")
        native = {"model": body.get("model"), "prompt": body["prompt"], "raw": False,
                  "suffix": body.get("suffix"), "options": _options(body),
                  "logprobs": bool(top), "top_logprobs": top or 0}
        stream = await service.generate(native)
        ident = f"cmpl-{secrets.randbelow(1000)}"
        if body.get("stream"):
            def convert(chunk, first):
                choice = {"text": chunk.get("response", ""), "index": 0,
                          "finish_reason": chunk.get("done_reason") if chunk.get("done")
                          else None}
                return [choice] if choice["text"] or chunk.get("done") else []

            include = bool((body.get("stream_options") or {}).get("include_usage"))
            return _sse(stream, convert, include, body["model"], "text_completion", ident)
        done = await folded(stream)
        return {"id": ident, "object": "text_completion", "created": int(time.time()),
                "model": body["model"], "system_fingerprint": FINGERPRINT,
                "choices": [{"text": done.get("response", ""), "index": 0, "logprobs": None,
                             "finish_reason": done.get("done_reason")}],
                "usage": _usage(done)}

    @api.post("/v1/embeddings", openapi_extra=documented("openai_embeddings"))
    async def embeddings(request: Request):
        body = await body_of(request)
        inputs = body.get("input")
        if isinstance(inputs, list) and inputs and not isinstance(inputs[0], str):
            raise ServeError(400, "invalid input type: token arrays are not supported")
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise ServeError(400, "encoding_format must be float or base64")
        vectors, count, _ = await service.embed({"model": body.get("model"), "input": inputs,
                                                 "dimensions": body.get("dimensions")})
        data = [{"object": "embedding", "index": i,
                 "embedding": vector if encoding == "float" else base64.b64encode(
                     struct.pack(f"<{len(vector)}f", *vector)).decode()}
                for i, vector in enumerate(vectors)]
        return {"object": "list", "data": data, "model": body["model"],
                "usage": {"prompt_tokens": count, "total_tokens": count}}

    @api.get("/v1/models")
    async def models():
        return {"object": "list", "data": [_model(e) for e in service.library.list()]}

    @api.get("/v1/models/{name:path}")
    async def model(name: str):
        return _model(service.entry(name))

    return api


def _model(entry) -> dict:
    namespace = entry.name.split("/")[0] if "/" in entry.name else "library"
    return {"id": entry.name, "object": "model", "created": int(entry.path.stat().st_mtime),
            "owned_by": namespace}
