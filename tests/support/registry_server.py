"""A model registry on loopback, written for the tests: the part of the registry HTTP API
that Ollama's pull uses (GET /v2/NS/MODEL/manifests/TAG, HEAD and ranged GET of
/v2/NS/MODEL/blobs/DIGEST, an optional Bearer token flow), and the part of Hugging Face's
that huggingface_hub's downloads use (GET /api/models/REPO/tree/main, HEAD and GET of
/REPO/resolve/main/FILE). Faults on demand: a blob's first transfer cut after some bytes,
every later one refused, a blob served corrupted. It records each request it answers. Also
the texts of a library model's template, system and params layers."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHUNK = 1 << 20
TOKEN = "tiny-registry-token"
COMMIT = "0" * 40
# the texts of a library model's template, system and params layers
GO_TEMPLATE = "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}" \
              "<|im_start|>user\n{{ .Prompt }}<|im_end|>\n<|im_start|>assistant\n"
PARAMS = {"stop": ["<|im_end|>"], "temperature": 0.25, "num_ctx": 512}
SYSTEM = "You are a terse assistant."


@dataclass
class Blob:
    path: Path
    digest: str
    size: int


@dataclass
class Served:
    """What the server holds and how it misbehaves."""
    manifests: dict = field(default_factory=dict)        # "ns/model:tag" -> manifest dict
    blobs: dict = field(default_factory=dict)            # digest -> Blob
    repos: dict = field(default_factory=dict)            # HF "user/repo" -> {file: Blob}
    cut: dict = field(default_factory=dict)              # digest -> bytes before the cut
    refuse_after_cut: bool = False                       # later transfers of it: 503
    was_cut: dict = field(default_factory=dict)          # digest -> where the cut one began
    corrupt: set = field(default_factory=set)            # digests served with a byte flipped
    token: bool = False                                  # require a Bearer token
    requests: list = field(default_factory=list)         # (method, path, Range header)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_blob(self, path: Path) -> Blob:
        data = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                data.update(chunk)
        blob = Blob(Path(path), "sha256:" + data.hexdigest(), Path(path).stat().st_size)
        self.blobs[blob.digest] = blob
        return blob

    def add_model(self, name: str, layers: list[tuple[str, Path]]) -> dict:
        """A manifest for name ("ns/model:tag") of (media type suffix, file) layers."""
        entries = []
        for kind, path in layers:
            blob = self.add_blob(path)
            entries.append({"mediaType": f"application/vnd.ollama.image.{kind}",
                            "digest": blob.digest, "size": blob.size})
        manifest = {"schemaVersion": 2,
                    "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                    "layers": entries}
        self.manifests[name] = manifest
        return manifest

    def ranges(self, digest: str) -> list[str]:
        return [r for method, path, r in self.requests if method == "GET" and
                path.endswith(digest)]


class Handler(BaseHTTPRequestHandler):
    served: Served
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._answer(head=True)

    def do_GET(self):
        self._answer(head=False)

    def _answer(self, head: bool) -> None:
        s = self.served
        with s.lock:
            s.requests.append((self.command, self.path, self.headers.get("Range")))
        path = self.path.split("?")[0]
        if path == "/token":
            return self._json({"token": TOKEN})
        if path.startswith("/v2/") and s.token and \
                self.headers.get("Authorization") != f"Bearer {TOKEN}":
            host = self.headers["Host"]
            return self._send(401, b"{}", {"WWW-Authenticate":
                                           f'Bearer realm="http://{host}/token",'
                                           f'service="tiny",scope="repository:pull"'})
        manifest = re.fullmatch(r"/v2/(.+)/manifests/([^/]+)", path)
        if manifest:
            found = s.manifests.get(f"{manifest.group(1)}:{manifest.group(2)}")
            return self._json(found) if found else self._send(404, b'{"errors":[]}')
        blob = re.fullmatch(r"/v2/.+/blobs/(sha256:[0-9a-f]{64})", path)
        if blob:
            found = s.blobs.get(blob.group(1))
            return self._blob(found, head) if found else self._send(404, b"{}")
        tree = re.fullmatch(r"/api/models/(.+)/tree/main", path)
        if tree and tree.group(1) in s.repos:
            return self._json([{"type": "file", "path": name, "size": b.size,
                                "oid": b.digest[7:47], "lfs": {"oid": b.digest[7:],
                                                               "size": b.size}}
                               for name, b in s.repos[tree.group(1)].items()])
        resolve = re.fullmatch(r"/(.+)/resolve/main/(.+)", path)
        if resolve and resolve.group(2) in s.repos.get(resolve.group(1), {}):
            found = s.repos[resolve.group(1)][resolve.group(2)]
            return self._blob(found, head, {"X-Repo-Commit": COMMIT,
                                            "ETag": f'"{found.digest[7:]}"'})
        self._send(404, b'{"error": "not found"}', {"X-Error-Code": "RepoNotFound"})

    def _blob(self, blob: Blob, head: bool, extra: dict | None = None) -> None:
        s, headers = self.served, dict(extra or {})
        start, stop = 0, blob.size
        wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        if wanted:
            start = int(wanted.group(1))
            stop = min(int(wanted.group(2)) + 1 if wanted.group(2) else blob.size, blob.size)
            if start >= blob.size:                          # past its end: 416, as HTTP says
                return self._send(416, b"", {"Content-Range": f"bytes */{blob.size}"})
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{blob.size}"
        if head:
            return self._send(200, b"", dict(headers, **{"Content-Length": str(blob.size)}),
                              body=False)
        with s.lock:
            limit = s.cut.pop(blob.digest, None)
            refused = s.refuse_after_cut and blob.digest in s.was_cut
            if limit is not None:
                s.was_cut[blob.digest] = start
        if refused:
            return self._send(503, b"{}")
        self.send_response(206 if wanted else 200)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(stop - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        sent = 0
        with open(blob.path, "rb") as f:
            f.seek(start)
            while start + sent < stop:
                chunk = f.read(min(CHUNK, stop - start - sent))
                if blob.digest in s.corrupt and start + sent == 0:
                    chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
                if limit is not None and sent + len(chunk) > limit:
                    self.wfile.write(chunk[:limit - sent])
                    self.wfile.flush()
                    self.close_connection = True
                    return                                  # the connection drops here
                self.wfile.write(chunk)
                sent += len(chunk)

    def _json(self, value) -> None:
        self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"})

    def _send(self, status: int, data: bytes, headers: dict | None = None,
              body: bool = True) -> None:
        self.send_response(status)
        headers = headers or {}
        for key, value in headers.items():
            self.send_header(key, value)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)


class RegistryServer:
    """The server on a free loopback port, in a thread, until close()."""

    def __init__(self, served: Served | None = None, handler_class: type = Handler):
        self.served = served or Served()
        handler = type("BoundHandler", (handler_class,), {"served": self.served})
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.http.daemon_threads = True
        self.host = f"127.0.0.1:{self.http.server_address[1]}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"


def with_config(served: Served, name: str, path, config: dict) -> None:
    """name's manifest with the config blob Ollama's registry serves (types/model/config.go)."""
    path.write_text(json.dumps(config))
    blob = served.add_blob(path)
    served.manifests[name]["config"] = {"mediaType": CONFIG_TYPE, "digest": blob.digest,
                                        "size": blob.size}
