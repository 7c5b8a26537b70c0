"""A reply's chunks as the service hands them on, with the model's lease they hold."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable


class Stream:
    """Chunks of one reply, holding its model's lease until they end or the stream is closed
    (iterate it once; whoever takes it closes it: the response that sends it, or folded)."""

    def __init__(self, chunks: AsyncGenerator[dict], release: Callable[[], None],
                 source: AsyncGenerator[dict], count: Callable | None = None):
        self._chunks, self._release, self._source = chunks, release, source
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


async def prepend(first, events):
    yield first
    async for event in events:
        yield event

