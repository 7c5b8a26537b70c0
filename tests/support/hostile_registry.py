"""A registry on loopback that lies (registry_server.py's, with answers planted per path):
manifests with huge, float, negative or string sizes, a string config, nested JSON; answers
that never end (a manifest, a token, an error body); answers that trickle a byte at a time,
headers included. It records how many bytes each planted answer sent and when its client
hung up, so that a test can say the puller stopped reading.

    served = HostileServed()
    served.plant(manifest_path("library/x:latest"), endless(b'{"layers": ['))
    with HostileRegistry(served) as registry:
        ... pull f"http://{registry.host}/library/x" ...
        assert registry.sent[manifest_path("library/x:latest")] < 5 << 20
"""

from __future__ import annotations

import json
import re
import time
from typing import Callable

from tests.support.registry_server import Handler, RegistryServer, Served

FILL = b" " * (64 << 10)
Answer = Callable[["HostileHandler"], None]


def endless(prefix: bytes = b"", status: int = 200) -> Answer:
    """A body that begins with prefix and never ends (no length: it ends only when the
    connection closes), sent as fast as the client reads."""
    def answer(handler: "HostileHandler") -> None:
        handler.head(status, {"Content-Type": "application/json", "Connection": "close"})
        handler.send(prefix)
        while handler.send(FILL):
            pass
    return answer


def trickle(body: bytes, every: float = 0.5, status: int = 200,
            headers_too: bool = False) -> Answer:
    """body, one byte every `every` seconds (with its headers the same way if headers_too)."""
    def answer(handler: "HostileHandler") -> None:
        head = (f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        if not headers_too:
            handler.wfile.write(head)
            head = b""
        for byte in head + body:
            if not handler.send(bytes([byte])):
                return
            time.sleep(every)
    return answer


def slow_blob(size: int, chunk: int = 1, every: float = 0.5) -> Answer:
    """A blob of size zero bytes (its ranges answered as HTTP says), chunk bytes every
    `every` seconds: a registry that delivers, slowly."""
    def answer(handler: "HostileHandler") -> None:
        start, stop = 0, size
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", handler.headers.get("Range") or "")
        headers = {"Content-Type": "application/octet-stream"}
        if wanted:
            start = int(wanted.group(1))
            stop = min(int(wanted.group(2)) + 1 if wanted.group(2) else size, size)
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
        handler.head(206 if wanted else 200, dict(headers, **{
            "Content-Length": str(stop - start)}))
        position = start
        while position < stop and handler.send(b"\0" * min(chunk, stop - position)):
            position += chunk
            time.sleep(every)
    return answer


def json_answer(value, status: int = 200, headers: dict | None = None) -> Answer:
    """value as JSON text (a str is sent as it is: nested JSON too deep to build)."""
    data = value.encode() if isinstance(value, str) else json.dumps(value).encode()

    def answer(handler: "HostileHandler") -> None:
        handler.head(status, {"Content-Type": "application/json",
                              "Content-Length": str(len(data)), **(headers or {})})
        handler.send(data)
    return answer


def challenge(host: str, realm: str = "/token") -> Answer:
    """401 with a Bearer challenge naming a realm on this registry."""
    return json_answer({}, 401, {"WWW-Authenticate": f'Bearer realm="http://{host}{realm}",'
                                                     'service="hostile",scope="pull"'})


def nested(depth: int, inner: str = "1") -> str:
    """JSON text nested depth arrays deep."""
    return "[" * depth + inner + "]" * depth


def manifest_path(name: str) -> str:
    """The path of a manifest: "ns/model:tag" -> /v2/ns/model/manifests/tag."""
    repository, tag = name.rsplit(":", 1)
    return f"/v2/{repository}/manifests/{tag}"


def blob_path(repository: str, digest: str) -> str:
    return f"/v2/{repository}/blobs/{digest}"


def manifest_of(layers: list[dict], config=None) -> dict:
    manifest = {"schemaVersion": 2, "mediaType":
                "application/vnd.docker.distribution.manifest.v2+json", "layers": layers}
    if config is not None:
        manifest["config"] = config
    return manifest


def model_layer(digest: str = "sha256:" + "ab" * 32, size=1 << 20) -> dict:
    return {"mediaType": "application/vnd.ollama.image.model", "digest": digest,
            "size": size}


class HostileServed(Served):
    """Served, with planted answers: path (without the query) -> answer."""

    def __init__(self):
        super().__init__()
        self.planted: dict[str, Answer] = {}
        self.sent: dict[str, int] = {}                  # path -> bytes its answers sent
        self.hung_up: dict[str, float] = {}             # path -> when a client hung up
        self.answering: dict[str, int] = {}             # path -> answers still being sent

    def plant(self, path: str, answer: Answer) -> None:
        self.planted[path] = answer


class HostileHandler(Handler):
    served: HostileServed

    def _answer(self, head: bool) -> None:
        path = self.path.split("?")[0]
        answer = self.served.planted.get(path)
        if answer is None:
            return super()._answer(head)
        s = self.served
        with s.lock:
            s.requests.append((self.command, self.path, self.headers.get("Range")))
            s.answering[path] = s.answering.get(path, 0) + 1
        self.close_connection = True
        try:
            answer(self)
        finally:
            with s.lock:
                s.answering[path] -= 1

    def head(self, status: int, headers: dict) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()

    def send(self, data: bytes) -> bool:
        """data to the client; False (and its hang-up recorded) once it has gone."""
        path, s = self.path.split("?")[0], self.served
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:
            with s.lock:
                s.hung_up[path] = time.monotonic()
            return False
        with s.lock:
            s.sent[path] = s.sent.get(path, 0) + len(data)
        return True


class HostileRegistry(RegistryServer):
    """The lying registry on a free loopback port, until close() (or the with block's end)."""

    def __init__(self, served: HostileServed | None = None):
        super().__init__(served or HostileServed(), HostileHandler)
        self.served: HostileServed

    @property
    def sent(self) -> dict[str, int]:
        return self.served.sent

    def __enter__(self) -> "HostileRegistry":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
