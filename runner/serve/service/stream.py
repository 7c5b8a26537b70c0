"""A reply's chunks as the service hands them on, with the model's lease they hold."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable

from ..web.errors import ServeError


class Stream:
    """Chunks of one reply, holding its model's lease until they end or the stream is closed
    (iterate it once; whoever takes it closes it: the response that sends it, or folded)."""

    def __init__(self, chunks: AsyncGenerator[dict], release: Callable[[], None],
                 source: AsyncGenerator[dict], count: Callable | None = None):
        self._chunks, self._source = chunks, source
        self._release: Callable[[], None] | None = release
        self._count = count

    async def prompt_tokens(self) -> int:
        """The prompt's length in tokens, before its reply (its text: images not counted),
        for APIs that report it first (Anthropic's message_start)."""
        return await self._count() if self._count else 0

    def __aiter__(self):
        return self._run()

    async def _run(self):
        try:
            async for chunk in self._chunks:
                yield chunk
        finally:
            self.release()

    def release(self) -> None:
        """Return the lease (once; not a coroutine, so a cancellation cannot stop it)."""
        release, self._release = self._release, None
        if release is not None:
            release()

    async def aclose(self) -> None:
        """Return the lease and end the runner's completion (the runner frees the slot)."""
        self.release()
        await self._chunks.aclose()
        await self._source.aclose()


class LateStream:
    """A Stream still being opened (the model loading, the prompt evaluated): iterating it
    waits for the opening, whose refusal comes as an error chunk (with its status); closed
    first, the opening is cancelled. estimate: the prompt's tokens until it is counted."""

    def __init__(self, opening: Awaitable[Stream], estimate: int = 0):
        self._opening = asyncio.ensure_future(opening)
        self._estimate = estimate

    async def prompt_tokens(self) -> int:
        """The estimate until the stream has opened (Ollama's too is len / 4), then the
        count."""
        if not self._opening.done() or self._opening.exception() is not None:
            return self._estimate
        return await self._opening.result().prompt_tokens()

    def __aiter__(self):
        return self._run()

    async def _run(self):
        try:
            stream = await asyncio.shield(self._opening)
        except ServeError as error:
            yield {"error": str(error), "status": error.status}
            return
        async for chunk in stream:
            yield chunk

    def release(self) -> None:
        if self._opening.done() and not self._opening.cancelled() and \
                self._opening.exception() is None:
            self._opening.result().release()

    async def aclose(self) -> None:
        if not self._opening.done():
            self._opening.cancel()
            await asyncio.gather(self._opening, return_exceptions=True)
        if not self._opening.cancelled() and self._opening.exception() is None:
            await self._opening.result().aclose()


Reply = Stream | LateStream         # what the service hands a route: its chunks, their lease
