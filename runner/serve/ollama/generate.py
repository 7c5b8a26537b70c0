"""Ollama's native API: /api/generate, /api/chat, /api/embed, /api/embeddings.

Streams are NDJSON (one object per line, never a blank line) unless `"stream": false`, when
the chunks are folded into one object: response or message content and thinking joined,
tool calls and logprobs gathered."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Request

from .bodies import ChatRequest, EmbeddingsRequest, EmbedRequest, GenerateRequest
from ..web.reading import Served, body, documented
from ..web.replies import folded, ndjson
from ..service.stream import Reply


api = APIRouter()
GenerateBody = Annotated[GenerateRequest, body(GenerateRequest)]
ChatBody = Annotated[ChatRequest, body(ChatRequest)]
EmbedBody = Annotated[EmbedRequest, body(EmbedRequest)]
EmbeddingsBody = Annotated[EmbeddingsRequest, body(EmbeddingsRequest)]


@api.post("/api/generate", openapi_extra=documented(GenerateRequest))
async def generate(request: GenerateBody, service: Served, http: Request):
    if not request.prompt and not request.images:
        return await service.load_only(request, chat=False)
    return await answer(await service.generate(request), request.stream, http)


@api.post("/api/chat", openapi_extra=documented(ChatRequest))
async def chat(request: ChatBody, service: Served, http: Request):
    if not request.messages:
        return await service.load_only(request, chat=True)
    return await answer(await service.chat(request), request.stream, http)


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


async def answer(stream: Reply, streaming: bool, http: Request):
    """NDJSON chunks, or the stream folded into one object."""
    return ndjson(stream, finished_calls) if streaming else \
        finished_calls(await folded(stream, http))


def finished_calls(chunk: dict) -> dict:
    """An error's line as Ollama writes it; a chunk without the call the length cut
    (Ollama's API has no way to say a call is unfinished: done_reason "length" says the
    reply was cut, as Ollama sends nothing)."""
    if "error" in chunk:              # Ollama's error line: the message alone
        return {"error": chunk["error"]}
    message = chunk.get("message")
    if message and any(call.get("cut") for call in message.get("tool_calls") or []):
        calls = [call for call in message["tool_calls"] if not call.get("cut")]
        message = dict(message, tool_calls=calls) if calls else \
            {k: v for k, v in message.items() if k != "tool_calls"}
        chunk = dict(chunk, message=message)
    return chunk
