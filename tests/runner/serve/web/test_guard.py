"""The Origin and Host checks (guard.py) on a real server: a page from another origin cannot
drive the API even with a "simple" text/plain POST, a rebound host name is refused, and the
origins Ollama allows (and RUNNER_ORIGINS adds) get their CORS headers."""

from __future__ import annotations

import pytest

from runner.serve.web.guard import allowed_origins, local_host, origin_allowed

from tests.support.server import ServerProcess


@pytest.fixture(scope="module")
def guarded(models_dir, workdir):
    server = ServerProcess(models_dir, workdir, RUNNER_ORIGINS="https://chat.example.org")
    yield server
    assert server.stop() == 0


def test_a_foreign_pages_simple_post_is_refused_before_it_runs(guarded):
    refused = guarded.client.post("/api/copy", headers={"Origin": "https://evil.example",
                                                        "Content-Type": "text/plain"},
                                  content=b'{"source": "smollm2:135m", "destination": "stolen"}')
    assert refused.status_code == 403 and "RUNNER_ORIGINS" in refused.json()["error"]
    assert guarded.client.post("/api/show", json={"model": "stolen"}).status_code == 404


def test_a_rebound_host_name_is_refused(guarded):
    refused = guarded.client.get("/api/tags", headers={"Host": f"evil.example:{guarded.port}"})
    assert refused.status_code == 403 and "loopback" in refused.json()["error"]
    for host in (f"localhost:{guarded.port}", f"127.0.0.1:{guarded.port}",
                 f"[::1]:{guarded.port}"):
        assert guarded.client.get("/api/tags", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("origin", ["http://localhost:3000", "https://127.0.0.1",
                                    "app://obsidian.md", "https://chat.example.org"])
def test_allowed_origins_are_served_with_cors_headers(guarded, origin):
    answer = guarded.client.get("/api/version", headers={"Origin": origin})
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == origin
    preflight = guarded.client.options("/api/chat", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 204
    assert "POST" in preflight.headers["access-control-allow-methods"]


def test_the_rules_themselves():
    patterns = allowed_origins("chrome-extension://*")
    assert origin_allowed("chrome-extension://abc", patterns)
    assert origin_allowed("http://0.0.0.0:8080", patterns)
    assert not origin_allowed("http://localhost.evil.example", patterns)
    assert not origin_allowed("null", patterns)
    assert all(local_host(h) for h in ("localhost", "127.0.0.1:11434", "[::1]:1", "a.localhost",
                                       None, "0.0.0.0:80"))
    assert not any(local_host(h) for h in ("example.com", "10.0.0.1.example", "1.2.3.4:80"))
