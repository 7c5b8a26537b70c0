"""`python -m runner serve [--host 127.0.0.1] [--port 11434]`: Ollama's API and OpenAI's.

RUNNER_HOST (host:port, :port, or http://host:port) sets the address when the flags do not.
It listens on loopback by default, Ollama's port, so that Ollama's clients work unchanged;
binding any other address logs a warning: the API has no authentication. SIGTERM and SIGINT
end the runners and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

import uvicorn

from .app import create_app
from .service.options import DEFAULT_PORT, address

LOOPBACK = ("127.0.0.1", "localhost", "::1")
log = logging.getLogger("runner.serve")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner serve",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1, or RUNNER_HOST)")
    parser.add_argument("--port", type=int, help=f"default {DEFAULT_PORT}, or RUNNER_HOST's")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)      # a line per runner call
    try:
        host, port = address(os.environ.get("RUNNER_HOST"))
        host, port = args.host or host, args.port if args.port is not None else port
        app = create_app(loopback=host in LOOPBACK)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if host not in LOOPBACK:
        log.warning("Listening on %s: this API has no authentication; anyone who reaches the "
                    "port can run and delete models.", host)
    # uvicorn shuts down gracefully on SIGTERM or SIGINT, then raises the signal again: let
    # that be a no-op, so the process exits 0
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: None)
    Serving(uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,
                           timeout_graceful_shutdown=10)).run()
    return 0


class Serving(uvicorn.Server):
    """uvicorn's server, which on SIGTERM or SIGINT first ends the runners, so that every
    reply in progress ends at once with its error (a last line, or a JSON error) and the
    graceful shutdown has nothing left to wait for."""

    async def startup(self, sockets=None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig, frame) -> None:
        if not self.should_exit and getattr(self, "loop", None) is not None:
            app: Any = self.config.app             # the FastAPI app create_app() made
            service = app.state.service
            def shut_down():
                self.shutting_down = self.loop.create_task(service.shut_down())   # held

            self.loop.call_soon_threadsafe(shut_down)
        super().handle_exit(sig, frame)
