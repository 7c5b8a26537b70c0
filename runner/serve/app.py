"""The server's HTTP application: Ollama's native routes and OpenAI's, one error path.

Errors are {"error": "<message>"} with Ollama's statuses (400 bad request, 404 unknown model,
499 client gone, 503 queue full, 500 otherwise), Anthropic's shape under /v1/messages, or
OpenAI's {"error": {...}} shape elsewhere under /v1. The OpenAPI schema is at /openapi.json."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException

from .anthropic import routes as anthropic_api
from .library.store import Library
from .ollama import create, manage
from .ollama import generate as native
from .openai import routes as openai_api
from .openai import transcriptions
from .responses import routes as responses_api
from .service.options import Settings
from .service.scheduler import Scheduler
from .service.core import ServeError, Service
from .web.access_log import AccessLog
from .web.gone import CancelWhenGone
from .web.guard import Guard, allowed_origins
from .web.reading import DOCUMENTED, sentence

log = logging.getLogger("runner.serve")


def error(request: Request, status: int, message: str, code: str | None = None
          ) -> JSONResponse:
    path = request.url.path
    body = anthropic_api.error_body(status, message) if path.startswith(anthropic_api.PREFIX) \
        else openai_api.error_body(status, message, code) \
        if path.startswith(("/v1/", *openai_api.UNVERSIONED)) \
        else {"error": message}
    return JSONResponse(body, status_code=status)


def create_app(settings: Settings | None = None, library: Library | None = None,
               loopback: bool = True) -> FastAPI:
    """The application; loopback: it listens on a loopback address only, so Host headers
    that are not loopback names are refused (guard.py)."""
    settings = settings or Settings.from_environment()
    scheduler = Scheduler(settings)
    service = Service(library or Library(), scheduler, settings)
    app = FastAPI(title="runner serve", version=manage.package_version(),
                  description="Ollama's API and OpenAI's, over runner subprocesses.")
    app.state.service = service

    @app.exception_handler(ServeError)
    async def refused(request: Request, failure: ServeError):
        return error(request, failure.status, str(failure), failure.code)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, failure: RequestValidationError):
        return error(request, 400, "; ".join(e.get("msg", "") for e in failure.errors()))

    @app.exception_handler(ValidationError)
    async def invalid_translation(request: Request, failure: ValidationError):
        """A native request made from an OpenAI one that its checks refuse."""
        return error(request, 400, sentence(failure))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, failure: StarletteHTTPException):
        return error(request, failure.status_code, str(failure.detail))

    @app.exception_handler(Exception)
    async def fault(request: Request, failure: Exception):
        log.exception("A request failed.")
        return error(request, 500, f"the server failed: {failure}")

    @app.on_event("shutdown")
    async def stop_runners():
        await scheduler.stop()

    for module in (manage, create, native, openai_api, responses_api, anthropic_api,
                   transcriptions):
        app.include_router(module.api)
    # FastAPI's documented way to give the app its own schema
    app.openapi = lambda: app.openapi_schema or published(app)  # type: ignore[method-assign]
    app.add_middleware(CancelWhenGone)         # innermost: around the route alone
    app.add_middleware(Guard, origins=allowed_origins(), check_host=loopback)
    app.add_middleware(AccessLog)              # outermost: refused requests are logged too
    return app


def published(app: FastAPI) -> dict:
    """The OpenAPI schema, with the request bodies' pydantic schemas as its components."""
    schema = get_openapi(title=app.title, version=app.version, description=app.description,
                         routes=app.routes)
    _, bodies = models_json_schema([(kind, "validation") for kind in DOCUMENTED],
                                   ref_template="#/components/schemas/{model}")
    schema.setdefault("components", {}).setdefault("schemas", {}).update(bodies["$defs"])
    app.openapi_schema = schema
    return schema
