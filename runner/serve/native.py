"""Ollama's native API: /api/generate, /api/chat, /api/embed, /api/embeddings.

Streams are NDJSON (one object per line, never a blank line) unless `"stream": false`, when
the chunks are folded into one object: response or message content and thinking joined,
tool calls and logprobs gathered."""

from __future__ import annotations

import json
import time

from typing import Annotated

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from .bodies import ChatRequest, EmbeddingsRequest, EmbedRequest, GenerateRequest
from .reading import Served, body, documented
from .service import ServeError, Stream


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


api = APIRouter()
GenerateBody = Annotated[GenerateRequest, body(GenerateRequest)]
ChatBody = Annotated[ChatRequest, body(ChatRequest)]
EmbedBody = Annotated[EmbedRequest, body(EmbedRequest)]
EmbeddingsBody = Annotated[EmbeddingsRequest, body(EmbeddingsRequest)]


@api.post("/api/generate", openapi_extra=documented(GenerateRequest))
async def generate(request: GenerateBody, service: Served):
    if not request.prompt and not request.images:
        return await service.load_only(request, chat=False)
    return await answer(await service.generate(request), request.stream)


@api.post("/api/chat", openapi_extra=documented(ChatRequest))
async def chat(request: ChatBody, service: Served):
    if not request.messages:
        return await service.load_only(request, chat=True)
    return await answer(await service.chat(request), request.stream)


@api.post("/api/embed", openapi_extra=documented(EmbedRequest))
async def embed(request: EmbedBody, service: Served):
    started = time.perf_counter_ns()
    vectors, count, load = await service.embed(request)
    return {"model": request.model, "embeddings": vectors,
            "total_duration": time.perf_counter_ns() - started, "load_duration": load,
            "prompt_eval_count": count}


@api.post("/api/embeddings", openapi_extra=documented(EmbeddingsRequest))
async def embeddings(request: EmbeddingsBody, service: Served):
    """The legacy form: one prompt, a vector not normalised."""
    single = EmbedRequest(model=request.model, input=request.prompt,
                          keep_alive=request.keep_alive, options=request.options)
    if not request.prompt:
        await service.load_only(single, chat=False)
        return {"embedding": []}
    vectors, _, _ = await service.embed(single, normalize=False)
    return {"embedding": vectors[0]}


async def answer(stream: Stream, streaming: bool):
    """NDJSON chunks, or the stream folded into one object."""
    return ndjson(stream) if streaming else await folded(stream)
