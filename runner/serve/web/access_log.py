"""A line per request, as Ollama's server logs them (gin's format): status, duration, client,
method and path with its query, written when the reply ends (a stream's at its last byte).

    | 200 |    1.234567ms |       127.0.0.1 | POST     "/v1/messages?beta=true"

With RUNNER_DEBUG_LOG_REQUESTS=1 each request's body follows its line (up to BODY_LIMIT
bytes; Ollama's OLLAMA_DEBUG_LOG_REQUESTS writes them to files): what a front-end sent,
for whoever debugs it. Bodies may hold private text; the switch is off by default.
"""

from __future__ import annotations

import json
import logging
import os
import time

log = logging.getLogger("runner.serve.access")
BODY_LIMIT = 64 * 1024


def body_logging() -> bool:
    return os.environ.get("RUNNER_DEBUG_LOG_REQUESTS", "").lower() in ("1", "true", "yes")


def line(status: int, seconds: float, client: str, method: str, target: str) -> str:
    return (f"| {status:3d} | {_duration(seconds):>13} | {client:>15} | {method:<7} "
            f"{json.dumps(target)}")


def _duration(seconds: float) -> str:
    """As Go prints a time.Duration: 812.5µs, 1.234567ms, 2.5s."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3f}".rstrip("0").rstrip(".") + "µs"
    if seconds < 1:
        return f"{seconds * 1e3:.6f}".rstrip("0").rstrip(".") + "ms"
    return f"{seconds:.6f}".rstrip("0").rstrip(".") + "s"


class AccessLog:
    """ASGI middleware writing each request's line (and body, when asked)."""

    def __init__(self, app, bodies: bool | None = None):
        self.app = app
        self.bodies = body_logging() if bodies is None else bodies

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), 500
        received: list[bytes] = []

        async def watched_receive():
            message = await receive()
            if self.bodies and message["type"] == "http.request" and \
                    sum(map(len, received)) < BODY_LIMIT:
                received.append(message.get("body", b""))
            return message

        async def watched_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive if not self.bodies else watched_receive,
                           watched_send)
        finally:
            client = (scope.get("client") or ("", 0))[0]
            query = scope.get("query_string", b"").decode("latin-1")
            target = scope["path"] + (f"?{query}" if query else "")
            log.info(line(status, time.perf_counter() - started, client, scope["method"],
                          target))
            if received:
                log.info("body of %s %s: %s", scope["method"], target,
                         b"".join(received)[:BODY_LIMIT].decode("utf-8", "replace"))
