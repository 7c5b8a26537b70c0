"""Each request logged as Ollama logs it (status, duration, client, method, the path with its
query), refused ones too; bodies only when RUNNER_DEBUG_LOG_REQUESTS asks."""

from __future__ import annotations

import time

from runner.serve.web.access_log import line

from tests.support.server import ServerProcess


def test_the_line_is_gins():
    assert line(200, 0.0012345678, "127.0.0.1", "POST", "/v1/messages?beta=true") == \
        '| 200 |    1.234568ms |       127.0.0.1 | POST    "/v1/messages?beta=true"'
    assert line(404, 2.5, "::1", "GET", "/x").startswith("| 404 |          2.5s |")
    assert "812.5µs" in line(200, 0.0008125, "", "HEAD", "/")


def logged(server: ServerProcess, text: str) -> str:
    deadline = time.monotonic() + 30
    while text not in server.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    return server.log.read_text()


def test_requests_are_logged_and_bodies_only_when_asked(models_dir, tmp_path):
    for bodies in (False, True):
        server = ServerProcess(models_dir, tmp_path,
                               **({"RUNNER_DEBUG_LOG_REQUESTS": "1"} if bodies else {}))
        try:
            server.client.post("/api/show?verbose=false", json={"model": "tiny-qwen"})
            server.client.post("/api/show", json={"model": "no-such-model"})
            log = logged(server, '"/api/show"')
            assert '| 200 |' in log and 'POST    "/api/show?verbose=false"' in log
            assert '| 404 |' in log and 'POST    "/api/show"' in log
            assert ('"model": "no-such-model"' in log or '"model":"no-such-model"' in log) \
                == bodies
        finally:
            server.stop()
