"""A request whose client leaves before its reply starts is cancelled: it stops waiting for
a model (so it leaves the scheduler's queue, and no model is loaded or unloaded for it), for
a prompt to be read, or for a reply it would fold into one answer. Streams already sending
are ended by the response that sends them (Starlette's watch of the same disconnect).

The watch starts once the request's body is read (before, a read would take the body's
bytes from the route), and listens for the server's http.disconnect message."""

from __future__ import annotations

import asyncio
import json

from .replies import GONE


class CancelWhenGone:
    """ASGI middleware: the route's task is cancelled when its client disconnects after
    sending its body and before any reply; the access log then reads 499."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, left = False, False
        watcher: asyncio.Task | None = None
        route: asyncio.Task | None = None

        async def watch() -> None:
            nonlocal left
            while (await receive())["type"] != "http.disconnect":
                pass
            if not started and route is not None and not route.done():
                left = True
                route.cancel()

        async def body_then_watch():
            nonlocal watcher
            message = await receive()
            if watcher is None and message["type"] == "http.request" and \
                    not message.get("more_body", False):
                watcher = asyncio.ensure_future(watch())
            return message

        async def watched_send(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        route = asyncio.ensure_future(self.app(scope, body_then_watch, watched_send))
        try:
            await route
        except asyncio.CancelledError:
            if not left or asyncio.current_task().cancelling():     # type: ignore[union-attr]
                raise
            await _answer_gone(send)
        finally:
            if watcher is not None:
                watcher.cancel()


async def _answer_gone(send) -> None:
    """The 499 nobody reads (the server drops what is sent to a closed connection), so that
    the access log names what happened."""
    body = json.dumps({"error": "The client disconnected; its request was cancelled."})
    await send({"type": "http.response.start", "status": GONE,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body.encode()})
