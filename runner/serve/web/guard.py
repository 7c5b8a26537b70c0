"""Who may drive the API, as Ollama decides it: browsers only from allowed origins, and, on
a loopback bind, only requests addressed to a loopback name.

A web page can send a "simple" cross-origin POST without asking first; its Origin header is
then the only sign, so a request whose Origin is not allowed is refused (403) before any
route runs. Programs that are not browsers send no Origin and are not affected. DNS
rebinding makes a page's own host name resolve to 127.0.0.1: its Host header still names the
page's host, so a server bound to loopback refuses Host names that are not loopback ones.
Allowed origins: RUNNER_ORIGINS (comma-separated, `*` wildcards), then Ollama's defaults:
http(s)://localhost, 127.0.0.1 and 0.0.0.0 on any port, and the app schemes
(app, file, tauri, vscode-webview, vscode-file)."""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import os
import socket

from starlette.datastructures import Headers

LOCAL_HOSTS = ("localhost", "127.0.0.1", "0.0.0.0")
APP_SCHEMES = ("app://*", "file://*", "tauri://*", "vscode-webview://*", "vscode-file://*")
LOCAL_SUFFIXES = (".localhost", ".local", ".internal")
PREFLIGHT_HEADERS = [(b"access-control-allow-methods", b"GET, POST, PUT, PATCH, DELETE, HEAD, "
                                                        b"OPTIONS"),
                     (b"access-control-allow-headers", b"Authorization, Content-Type, "
                                                        b"User-Agent, Accept, X-Requested-With, "
                                                        b"OpenAI-Beta, x-stainless-*"),
                     (b"access-control-max-age", b"43200")]


def allowed_origins(extra: str | None = None) -> tuple[str, ...]:
    """RUNNER_ORIGINS' patterns, then the defaults."""
    given = os.environ.get("RUNNER_ORIGINS", "") if extra is None else extra
    defaults = [f"{scheme}://{host}{port}" for host in LOCAL_HOSTS
                for scheme in ("http", "https") for port in ("", ":*")]
    return tuple(p.strip() for p in given.split(",") if p.strip()) + tuple(defaults) + \
        APP_SCHEMES


def origin_allowed(origin: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(origin.lower(), pattern.lower()) for pattern in patterns)


def local_host(host_header: str | None) -> bool:
    """Whether a Host header names this machine by a loopback or local name."""
    if not host_header:
        return True                                   # HTTP/1.0 clients send none
    host = host_header.strip().lower()
    if host.startswith("["):                          # [::1]:11434
        host = host[1:host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    try:
        address = ipaddress.ip_address(host)
        return address.is_loopback or address.is_unspecified
    except ValueError:
        pass
    return host == "localhost" or host.endswith(LOCAL_SUFFIXES) or \
        host == socket.gethostname().lower()


class Guard:
    """ASGI middleware: the Origin and Host checks, and CORS headers for allowed origins."""

    def __init__(self, app, origins: tuple[str, ...], check_host: bool):
        self.app, self.origins, self.check_host = app, origins, check_host

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if self.check_host and not local_host(headers.get("host")):
            return await _refuse(send, f"The Host {headers.get('host')!r} is not a loopback "
                                       "name; this server, bound to loopback, answers only "
                                       "requests addressed to localhost.")
        if origin is None:
            return await self.app(scope, receive, send)
        if not origin_allowed(origin, self.origins):
            return await _refuse(send, f"The origin {origin!r} is not allowed; add it to "
                                       "RUNNER_ORIGINS to let its pages use this server.")
        cors = [(b"access-control-allow-origin", origin.encode("latin-1")),
                (b"vary", b"Origin")]
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await send({"type": "http.response.start", "status": 204,
                        "headers": cors + PREFLIGHT_HEADERS})
            return await send({"type": "http.response.body", "body": b""})

        async def with_cors(message):
            if message["type"] == "http.response.start":
                message = dict(message, headers=list(message.get("headers", [])) + cors)
            await send(message)

        await self.app(scope, receive, with_cors)


async def _refuse(send, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": 403,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
