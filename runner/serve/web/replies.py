"""How a stream of chunks reaches its client, with the lease it holds returned on every path:
streamed (NDJSON or SSE), or folded into one object while the client is watched, so that a
client who leaves cancels its generation whether it asked for a stream or not."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse

from ..service.core import ServeError
from ..service.stream import Reply

T = TypeVar("T")
GONE = 499                      # the status Ollama logs for a client that closed its request


class StreamReply(StreamingResponse):
    """A streamed reply that returns its stream's lease however the response ends: read to
    the end, failed, or the client gone before the first chunk was read."""

    def __init__(self, stream: Reply, body: AsyncIterator[str], media_type: str):
        super().__init__(body, media_type=media_type)
        self.stream = stream

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.stream.aclose()


KEEPALIVE = ": keep-alive\n\n"      # an SSE comment: every client skips it


def keepalive_seconds() -> float:
    """How long a stream may send nothing (a prompt being read, a model loading) before a
    keep-alive line: RUNNER_KEEPALIVE, 5 s by default."""
    return float(os.environ.get("RUNNER_KEEPALIVE", "5"))


def server_events(stream: Reply, start, each, failed, keepalive: str = KEEPALIVE
                  ) -> StreamReply:
    """stream as server-sent events: the lines of `await start()`, then each chunk's
    (`each(chunk)`), or `failed(message)`'s line for an error chunk, which ends it; the
    keepalive line whenever nothing came for keepalive_seconds()."""
    async def lines():
        for line in await start():
            yield line
        async for chunk in kept_alive(stream, keepalive_seconds()):
            if chunk is None:
                yield keepalive
                continue
            if "error" in chunk:
                yield failed(chunk["error"])
                return
            for line in each(chunk):
                yield line

    return StreamReply(stream, lines(), "text/event-stream")


async def kept_alive(chunks, every: float):
    """chunks, with None wherever none came for every seconds."""
    iterator = chunks.__aiter__()
    while True:
        pending = asyncio.ensure_future(iterator.__anext__())
        try:
            while not (await asyncio.wait({pending}, timeout=every))[0]:
                yield None
            try:
                chunk = pending.result()
            except StopAsyncIteration:
                return
        finally:
            if not pending.done():
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)
        yield chunk


def ndjson(stream: Reply, shape=lambda chunk: chunk) -> StreamReply:
    """The chunks as lines of JSON, each through shape."""
    async def lines():
        async for chunk in stream:
            yield json.dumps(shape(chunk)) + "\n"

    return StreamReply(stream, lines(), "application/x-ndjson")


async def unless_gone(request: Request, work: Awaitable[T]) -> T:
    """work's result, or a 499 with work cancelled when the client disconnects first."""
    task = asyncio.ensure_future(work)

    async def gone():
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise ServeError(GONE, "The client disconnected; its request was cancelled.")
    return task.result()


async def folded(stream: Reply, request: Request) -> dict:
    """One object from a whole stream (an error chunk raises), cancelled if the client
    leaves."""
    try:
        return await unless_gone(request, _fold(stream))
    finally:
        await stream.aclose()


async def folded_each(stream, request: Request) -> list[dict]:
    """One object per choice of a stream of several (openai_choices.Choices: each chunk
    tagged with its index), in index order, each with its index."""
    async def collect():
        return [chunk async for chunk in stream]

    try:
        chunks = await unless_gone(request, collect())
    finally:
        await stream.aclose()
    groups: dict[int, list] = {}
    for chunk in chunks:
        groups.setdefault(chunk.get("index", 0), []).append(chunk)
    return [dict(await _fold(_replay(group)), index=index)
            for index, group in sorted(groups.items())]


async def _replay(chunks: list[dict]):
    for chunk in chunks:
        yield chunk


async def _fold(stream: Reply) -> dict:
    result, texts, thoughts, calls, logprobs = {}, [], [], [], []
    async for chunk in stream:
        if "error" in chunk:
            raise ServeError(chunk.get("status", 500), chunk["error"])
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
