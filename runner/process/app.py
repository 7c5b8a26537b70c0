"""The runner protocol over HTTP (FastAPI): health, info, load, completion, embedding,
tokenize, detokenize. The OpenAPI schema is at /openapi.json, its pages at /docs.

Every error is a JSON body {"error": "<a full sentence>"}: 400 for a bad request, 501 for
what this model cannot do, 503 while no model is ready, 500 only for real faults.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import time
from dataclasses import replace

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

import pyggml

from ..api import split_options
from ..engine.request import Request as EngineRequest
from ..engine.request import truncate_prompt
from ..sample.budget import ThinkingBudget
from ..protocol import (
    OPERATIONS,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    LoadRequest,
    TokenizeRequest,
)
from .state import OutOfMemory, RunnerState, Status

log = logging.getLogger("runner.process")
DONE_REASONS = {"stop": 0, "length": 1, "closed": 2}
# options Ollama's server sends that concern loading, or samplers this runner lacks:
# accepted and ignored at completion time
IGNORED_OPTIONS = frozenset({
    "num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "use_mlock", "num_thread",
    "low_vram", "f16_kv", "vocab_only", "logits_all", "numa", "typical_p", "mirostat",
    "mirostat_tau", "mirostat_eta", "penalize_newline", "tfs_z"})


def _unsubmitted(event: dict) -> None:
    """A request's emit until submit() gives it the one that queues its events."""


class Refused(Exception):
    """A request this runner answers with an error status and a message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def describe(errors) -> str:
    parts = []
    for error in errors:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        if error.get("type") == "json_invalid":
            return "The request body is not valid JSON: " + error.get("ctx", {}).get(
                "error", error.get("msg", "")) + "."
        if not where and error.get("type") in ("model_attributes_type", "dict_type"):
            return "The request body must be a JSON object."
        if error.get("type") == "extra_forbidden":
            parts.append(f"{where} is not a field of this request")
            continue
        parts.append(f"{where}: {error.get('msg')}" if where else error.get("msg", ""))
    return "The request body is invalid: " + "; ".join(parts) + "."


class JSONBodies:
    """ASGI middleware: every request body is JSON, whatever its Content-Type says (curl -d
    sends a form type; Go clients may send none)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            scope = dict(scope, headers=headers + [(b"content-type", b"application/json")])
        await self.app(scope, receive, send)


class RequireSecret:
    """ASGI middleware: every request carries `Authorization: Bearer <secret>`, the secret
    the server gave this runner in RUNNER_SECRET, so that no other local process can drive
    it (401 otherwise)."""

    def __init__(self, app, secret: str):
        self.app, self.expected = app, f"Bearer {secret}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = json.dumps({"error": "This runner serves only the server that started "
                                            "it: the request lacks its secret."}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                return await send({"type": "http.response.body", "body": body})
        await self.app(scope, receive, send)


def create_app(state: RunnerState, secret: str | None = None) -> FastAPI:
    """secret: required of every request when given (RUNNER_SECRET)."""
    app = FastAPI(title="runner", description="The runner protocol: one model, served to "
                  "a server process that drives it.", version="1")
    app.add_middleware(JSONBodies)
    if secret:
        app.add_middleware(RequireSecret, secret=secret)

    @app.exception_handler(RequestValidationError)
    async def invalid(_, error: RequestValidationError):
        return JSONResponse({"error": describe(error.errors())}, status_code=400)

    @app.exception_handler(Refused)
    async def refused(_, error: Refused):
        return JSONResponse({"error": str(error)}, status_code=error.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_, error: StarletteHTTPException):
        return JSONResponse({"error": f"{error.detail}."}, status_code=error.status_code)

    @app.exception_handler(Exception)
    async def fault(_, error: Exception):
        log.exception("A request failed.")
        return JSONResponse({"error": f"The runner failed: {error}"}, status_code=500)

    def ready():
        status, _ = state.health()
        if status in (Status.READY, Status.NO_SLOT):
            return state.model, state.engine
        messages = {Status.LOADING: "The model is still loading; retry when /health is ready.",
                    Status.LAUNCHED: "No model is loaded; POST /load to commit one.",
                    Status.ERROR: state.error}
        raise Refused(503, messages.get(status, "The runner is not ready."))

    @app.get("/health")
    async def health():
        status, progress = state.health()
        body = {"status": int(status), "progress": progress}
        if state.error:
            body["error"] = state.error
        return body

    @app.get("/info")
    async def info():
        return [{"id": str(d.index), "backend": d.backend, "name": d.name,
                 "description": d.description, "total": d.memory_total, "free": d.memory_free}
                for d in pyggml.devices()]

    @app.post("/load")
    async def load(body: LoadRequest):
        flash = body.flash_attention
        flash = "auto" if flash is None else ("on" if flash else "off") \
            if isinstance(flash, bool) else flash
        try:
            changes: dict[str, object] = dict(
                parallel=body.parallel, batch_size=body.batch_size, ctx_size=body.kv_size,
                threads=body.num_threads, flash_attn=flash,
                kv_cache_type=body.kv_cache_type or "f16", multiuser_cache=body.multiuser_cache)
            if body.checkpoints is not None:
                changes["checkpoints"] = body.checkpoints
            if body.gpu_layers is not None:
                listed = {g.id: tuple(g.layers) for g in body.gpu_layers if g.layers}
                changes["devices"] = replace(state.with_defaults().devices, gpu_layers=listed)
            layout = state.with_defaults(**changes)
            operation = OPERATIONS[body.operation]
            if operation == "close":
                await asyncio.to_thread(state.close)
                return {"Success": True, "Memory": None}
            act = {"fit": state.fit, "alloc": state.alloc, "commit": state.commit}[operation]
            memory = await asyncio.to_thread(act, layout)
        except OutOfMemory as error:
            return {"Success": False, "Memory": error.memory, "error": str(error)}
        except (ValueError, pyggml.GGMLError) as error:
            raise Refused(400, str(error)) from error
        return {"Success": True, "Memory": memory}

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest):
        model, _ = ready()
        tokens = await asyncio.to_thread(model.tokenize, body.content, body.add_special,
                                         body.parse_special)
        return {"tokens": tokens}

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest):
        model, _ = ready()
        try:
            return {"content": model.detokenize(body.tokens)}
        except ValueError as error:
            raise Refused(400, str(error)) from error

    @app.post("/embedding")
    async def embedding(body: EmbeddingRequest):
        """The pooled final hidden states of content (as the model's file declares), not
        normalized; evaluated without the prompt cache."""
        arrived = time.perf_counter_ns()
        model, engine = ready()
        if engine.pooling is None:
            raise Refused(501, f"This model ({model.architecture}) is generative: its file "
                          "declares no pooling, so it makes no embeddings.")
        tokens = body.tokens
        if tokens is None:
            tokenized: list[int] = await asyncio.to_thread(model.tokenize, body.content, True)
            tokens = tokenized
        elif not tokens or not all(0 <= t < model.tokenizer.size for t in tokens):
            raise Refused(400, f"Token ids must be a non-empty list of ids in [0, "
                          f"{model.tokenizer.size}).")
        events = submit(engine, EngineRequest(tokens, _unsubmitted, arrived=arrived))
        event = await events.get()
        if "error" in event:
            raise Refused(500, event["error"])
        return event

    def submit(engine, request: EngineRequest) -> asyncio.Queue:
        """Queue request; its events arrive on the returned queue."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[dict] = asyncio.Queue()

        def emit(event: dict) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        request.emit = emit
        try:
            engine.submit(request)
        except (ValueError, RuntimeError) as error:
            raise Refused(400 if isinstance(error, ValueError) else 503, str(error)) from error
        return events

    @app.post("/completion")
    async def completion(body: CompletionRequest, http: Request):
        arrived = time.perf_counter_ns()
        model, engine = ready()
        if engine.pooling is not None:
            raise Refused(501, f"This model makes embeddings ({engine.pooling} pooling); it "
                          "cannot generate text.")
        try:
            sampling, options = split_options(body.options or {}, IGNORED_OPTIONS)
            if sampling.logit_bias and max(sampling.logit_bias) >= model.tokenizer.size:
                raise ValueError(f"logit_bias names token {max(sampling.logit_bias)}, beyond "
                                 f"the vocabulary of {model.tokenizer.size}.")
            constraint = await asyncio.to_thread(model.constraint, body.format, body.grammar,
                                                 body.think_tags, body.think_opened)
            budget = None if body.thinking_budget is None or not body.think_tags else \
                ThinkingBudget(body.thinking_budget, (body.think_tags[0], body.think_tags[1]),
                               model.tokenizer, body.think_opened)
        except (TypeError, ValueError) as error:
            raise Refused(400, str(error)) from error
        options.shift = state.shift_default if body.shift is None else body.shift
        try:
            tokens = await asyncio.to_thread(model.prompt_items, body.prompt,
                                             images_of(body.images))
        except ValueError as error:               # not an image, a tag without its image
            raise Refused(400, str(error)) from error
        if not tokens:
            raise Refused(400, "The prompt is empty: there is nothing to continue from.")
        if len(tokens) > engine.context:
            if not body.truncate:
                raise Refused(400, f"The prompt has {len(tokens)} tokens but the context "
                              f"holds {engine.context}, and truncation is off.")
            tokens = truncate_prompt(tokens, engine.context, options.num_keep)
        request = EngineRequest(tokens, _unsubmitted, sampling, options,
                                body.logprobs or body.top_logprobs > 0, body.top_logprobs,
                                arrived, constraint=constraint, budget=budget)
        events = submit(engine, request)
        return StreamingResponse(_lines(request, events), media_type="application/x-ndjson")

    return app


def images_of(images) -> dict[int, bytes] | None:
    """The protocol's images (base64 data, and the id its [img-ID] tag names)."""
    if not images:
        return None
    found = {}
    for image in images:
        if image.id in found:
            raise Refused(400, f"Two images have the id {image.id}.")
        try:
            found[image.id] = base64.b64decode(image.data, validate=True)
        except (binascii.Error, ValueError):
            raise Refused(400, f"The data of image {image.id} is not base64.") from None
    return found


async def _lines(request: EngineRequest, events: asyncio.Queue):
    """The NDJSON stream of one completion; leaving early (the client went away) frees its
    slot before the next step."""
    try:
        while True:
            event = await events.get()
            if event.get("done"):
                event = dict(event, done_reason=DONE_REASONS[event["done_reason"]])
            yield json.dumps(event) + "\n"
            if event.get("done") or "error" in event:
                return
    finally:
        request.cancel()
