"""The CLI's side of a running server (`python -m runner serve`, or Ollama itself: the API
is the same): found at RUNNER_HOST (default 127.0.0.1:11434), asked over HTTP. The
commands use it when it answers and work in process otherwise."""

from __future__ import annotations

import json
import os

import httpx

from ..serve.service.options import address


class ServerError(RuntimeError):
    pass


def base_url() -> str:
    host, port = address(os.environ.get("RUNNER_HOST"))
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"


class Client:
    def __init__(self, url: str | None = None):
        self.http = httpx.Client(base_url=url or base_url(), timeout=httpx.Timeout(None,
                                                                                    connect=2))

    @classmethod
    def running(cls) -> "Client | None":
        """A client of the server, or None when none answers."""
        client = cls()
        try:
            if client.http.get("/", timeout=1).status_code == 200:
                return client
        except httpx.HTTPError:
            pass
        return None

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        response = self.http.request(method, path, json=body)
        if response.status_code >= 400:
            raise ServerError(_error(response))
        return response.json() if response.content else {}

    def stream(self, path: str, body: dict):
        """The NDJSON objects of a streaming call; an error line raises."""
        with self.http.stream("POST", path, json=body) as response:
            if response.status_code >= 400:
                response.read()
                raise ServerError(_error(response))
            for line in response.iter_lines():
                if line:
                    chunk = json.loads(line)
                    if "error" in chunk:
                        raise ServerError(chunk["error"])
                    yield chunk


def _error(response: httpx.Response) -> str:
    try:
        return response.json().get("error", response.text)
    except ValueError:
        return response.text


def print_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for row in [header] + rows:
        print("    ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


def size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def chat_pieces(client: Client, model: str, messages: list[dict], options: dict):
    """The text of a chat reply, as it streams."""
    for chunk in client.stream("/api/chat", {"model": model, "messages": messages,
                                             "options": options}):
        yield chunk.get("message", {}).get("content", "")


def generate_pieces(client: Client, model: str, prompt: str, images: list[str],
                    options: dict):
    """The text of a raw continuation (images base64-encoded), as it streams."""
    body = {"model": model, "raw": True, "prompt": prompt, "options": options}
    if images:
        body["images"] = images
    for chunk in client.stream("/api/generate", body):
        yield chunk.get("response", "")


# -- the commands, against a server ------------------------------------------------------

def list_models(client: Client) -> int:
    models = client.call("GET", "/api/tags")["models"]
    print_table([[m["name"], m["digest"][:12], size(m["size"]), m["modified_at"][:19]]
                 for m in models], ["NAME", "ID", "SIZE", "MODIFIED"])
    return 0


def ps(client: Client) -> int:
    models = client.call("GET", "/api/ps")["models"]
    rows = []
    for m in models:
        where = "100% CPU" if not m["size_vram"] else \
            f"{100 * m['size_vram'] // max(m['size'], 1)}% GPU"
        rows.append([m["name"], m["digest"][:12], size(m["size"]), where,
                     str(m["context_length"]), m["expires_at"][:19]])
    print_table(rows, ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"])
    return 0


def stop(client: Client, model: str) -> int:
    client.call("POST", "/api/generate", {"model": model, "keep_alive": 0})
    return 0


def pull(client: Client, model: str, insecure: bool = False) -> int:
    from ..registry.progress import Bars

    bars = Bars()
    try:
        for chunk in client.stream("/api/pull", {"model": model, "insecure": insecure}):
            bars(chunk)
    finally:
        bars.close()
    return 0


def show(client: Client, model: str, template: bool) -> int:
    shown = client.call("POST", "/api/show", {"model": model})
    details, info = shown["details"], shown.get("model_info") or {}
    arch = info.get("general.architecture", details.get("family", ""))
    rows = [("architecture", arch), ("parameters", details.get("parameter_size", "")),
            ("quantization", details.get("quantization_level", "")),
            ("context length", info.get(f"{arch}.context_length", "unknown")),
            ("capabilities", ", ".join(shown.get("capabilities", [])))]
    for name, value in rows:
        print(f"{name:<17}{value}")
    if template and shown.get("template"):
        print("\n" + shown["template"])
    return 0


def remove(client: Client, model: str) -> int:
    client.call("DELETE", "/api/delete", {"model": model})
    print(f"deleted '{model}'")
    return 0


def copy(client: Client, source: str, destination: str) -> int:
    client.call("POST", "/api/copy", {"source": source, "destination": destination})
    print(f"copied '{source}' to '{destination}'")
    return 0
