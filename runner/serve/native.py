"""Ollama's native API: /api/generate, /api/chat, /api/embed, /api/embeddings.

Streams are NDJSON (one object per line, never a blank line) unless `"stream": false`, when
the chunks are folded into one object: response or message content and thinking joined,
tool calls and logprobs gathered."""

from __future__ import annotations

import json
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from .schemas import documented
from .service import Service, ServeError, Stream


def ndjson(stream: Stream) -> StreamingResponse:
    async def lines():
        async for chunk in stream:
            yield json.dumps(chunk) + "\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson")


async def folded(stream: Stream) -> dict:
    """One object from a whole stream (an error chunk raises)."""
    result, texts, thoughts, calls, logprobs = {}, [], [], [], []
    async for chunk in stream:
        if "error" in chunk:
            raise ServeError(500, chunk["error"])
        message = chunk.get("message", chunk)
        texts.append(message.get("content", message.get("response", "")))
        thoughts.append(message.get("thinking", ""))
        calls += message.get("tool_calls", [])
        logprobs += chunk.get("logprobs", [])
        result = chunk
    if "message" in result:
        result["message"] = dict(result["message"], content="".join(texts))
        if any(thoughts):
            result["message"]["thinking"] = "".join(thoughts)
        if calls:
            result["message"]["tool_calls"] = calls
    else:
        result["response"] = "".join(texts)
        if any(thoughts):
            result["thinking"] = "".join(thoughts)
    if logprobs:
        result["logprobs"] = logprobs
    return result


async def body_of(request: Request) -> dict:
    """The JSON object of a request; Ollama's messages for a missing or bad one."""
    raw = await request.body()
    if not raw:
        raise ServeError(400, "missing request body")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ServeError(400, f"invalid JSON: {error}") from None
    if not isinstance(body, dict):
        raise ServeError(400, "the request body must be a JSON object")
    for field, kinds in TYPES.items():
        if body.get(field) is not None and not isinstance(body[field], kinds):
            raise ServeError(400, f'"{field}" has the wrong type')
    return body


TYPES = {"model": str, "prompt": str, "system": str, "template": str, "suffix": str,
         "stream": bool, "raw": bool, "options": dict, "messages": list, "tools": list,
         "context": list, "images": list, "truncate": bool, "shift": bool, "logprobs": bool,
         "top_logprobs": int, "keep_alive": (int, float, str)}


def router(service: Service) -> APIRouter:
    api = APIRouter()

    @api.post("/api/generate", openapi_extra=documented("generate"))
    async def generate(request: Request):
        body = await body_of(request)
        if not body.get("prompt") and not body.get("images"):
            return await service.load_only(body, chat=False)
        stream = await service.generate(body)
        return ndjson(stream) if body.get("stream", True) else await folded(stream)

    @api.post("/api/chat", openapi_extra=documented("chat"))
    async def chat(request: Request):
        body = await body_of(request)
        if not body.get("messages"):
            return await service.load_only(body, chat=True)
        stream = await service.chat(body)
        return ndjson(stream) if body.get("stream", True) else await folded(stream)

    @api.post("/api/embed", openapi_extra=documented("embed"))
    async def embed(request: Request):
        started = time.perf_counter_ns()
        body = await body_of(request)
        vectors, count, load = await service.embed(body)
        return {"model": body["model"], "embeddings": vectors,
                "total_duration": time.perf_counter_ns() - started, "load_duration": load,
                "prompt_eval_count": count}

    @api.post("/api/embeddings", openapi_extra=documented("embeddings"))
    async def embeddings(request: Request):
        """The legacy form: one prompt, a vector not normalised."""
        body = await body_of(request)
        if not body.get("prompt"):
            await service.load_only(body, chat=False)
            return {"embedding": []}
        vectors, _, _ = await service.embed(dict(body, input=body["prompt"]), normalize=False)
        return {"embedding": vectors[0]}

    return api


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
