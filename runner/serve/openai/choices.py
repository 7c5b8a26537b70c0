"""What OpenAI's API asks beyond one reply per request: several choices (`n`, a completion's
prompt array) produced one after another, each chunk tagged with its choice's index; and the
legacy completions' logprobs (tokens, token_logprobs, top_logprobs, text_offset)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable


class Choices:
    """Native streams run one after another as one stream (the lease of the one running is
    held); each chunk carries `index`, its choice's. The first stream is opened before
    (so that a refusal is the request's status); a later one that cannot open ends the
    stream with an error chunk carrying the refusal's status."""

    def __init__(self, first, opens: list[Callable[[], Awaitable]]):
        self.current, self.opens = first, opens

    def __aiter__(self):
        return self._run()

    async def _run(self):
        index = 0
        while True:
            async for chunk in self.current:
                yield dict(chunk, index=index)
            if not self.opens:
                return
            index += 1
            try:
                self.current = await self.opens.pop(0)()
            except Exception as error:                   # noqa: BLE001 - told in the stream
                yield {"error": str(error), "index": index,
                       "status": getattr(error, "status", 500)}
                return

    async def aclose(self) -> None:
        self.opens = []
        await self.current.aclose()


def completion_logprobs(entries: list[dict], offset: int) -> dict:
    """A legacy completion's logprobs from native per-token entries; offset: where the
    completion's text starts in the choice's text (after an echoed prompt)."""
    tokens, offsets = [], []
    for entry in entries:
        offsets.append(offset)
        tokens.append(entry["token"])
        offset += len(entry["token"])
    return {"tokens": tokens, "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]}
                             for e in entries],
            "text_offset": offsets}
