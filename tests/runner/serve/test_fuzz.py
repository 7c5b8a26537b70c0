"""Schema-driven fuzzing of the server's published OpenAPI schema with schemathesis, on
loopback and bounded: whatever a generated request holds, no 500 and no crash. Half the
generated bodies name a real model (their options kept short and their context fixed, so a
run stays quick), so fuzzing reaches the runners, not only the 404s. Operations that write
the store (pull, create, copy, delete, blob uploads) are left out."""

from __future__ import annotations

import os

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings, strategies  # noqa: E402

WRITES = ("/api/pull", "/api/create", "/api/copy", "/api/delete", "/api/blobs/{digest}")
RELOADING = ("num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread", "use_mmap")
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", 30))  # per operation; raise it to hunt


def aimed(case, real: bool, model: str):
    """The case, its body naming model and its options bounded, when real."""
    body = case.body
    if real and isinstance(body, dict) and "model" in body:
        body["model"] = model
        options = body.get("options")
        if isinstance(options, dict):
            for name in RELOADING:
                options.pop(name, None)
            options["num_predict"] = 4                   # else it could go on for ever
        elif case.path.startswith("/api/"):
            body["options"] = {"num_predict": 4}
        if case.path.startswith("/v1/") and "embeddings" not in case.path:
            body["max_tokens"] = 4
            body.pop("max_completion_tokens", None)          # it would win over max_tokens
            if case.path == "/v1/responses":
                body["max_output_tokens"] = 4
        if isinstance(body.get("dimensions"), int):
            body["dimensions"] = max(1, min(body["dimensions"], 4))
        body.pop("keep_alive", None)
    return case


def test_no_generated_request_makes_the_server_fail(server):
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    fuzzed = [op for op in operations if op.path not in WRITES]
    assert {"/api/generate", "/api/chat", "/v1/chat/completions"} <= {op.path for op in fuzzed}
    for operation in fuzzed:
        model = "tiny-bert" if "embed" in operation.path else "smollm2:135m"

        @given(case=operation.as_strategy(), real=strategies.booleans())
        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def call(case, real):
            case = aimed(case, real, model)  # noqa: B023 (called within this iteration)
            response = case.call(base_url=server.url, timeout=120)
            assert response.status_code < 500, (case.method, case.path, case.body,
                                                response.text)
            assert server.proc.poll() is None

        call()
