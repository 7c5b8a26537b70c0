"""Reading a request: its JSON body, bounded in size, into the route's pydantic model, or a
400 whose sentence names the field; and the service the application holds.

Bodies are read as JSON whatever their Content-Type, as Ollama reads them (`curl -d` sends
form-urlencoded); browsers are kept out by the Origin check (guard.py), not by the type.
pydantic's parser refuses NaN, lone surrogates and nesting deeper than it can follow."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request
from pydantic import ValidationError
from pydantic_core import from_json

from ..ollama.bodies import Body
from ..service.core import ServeError, Service

B = TypeVar("B", bound=Body)
DOCUMENTED: list[type[Body]] = []          # the bodies /openapi.json publishes
SHOWN_ERRORS = 3


def service_of(request: Request) -> Service:
    return request.app.state.service


Served = Annotated[Service, Depends(service_of)]


async def raw_body(request: Request, limit: int) -> bytes:
    """The body's bytes; a 413 past limit bytes, before more is read."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(limit: int) -> ServeError:
    return ServeError(413, f"The request body is larger than the server accepts ({limit} "
                           "bytes; RUNNER_MAX_BODY sets it).")


def parse(kind: type[B], raw: bytes) -> B:
    if not raw.strip():
        raise ServeError(400, "missing request body")
    try:
        data = from_json(raw, allow_inf_nan=False)
    except ValueError as error:
        raise ServeError(400, f"invalid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ServeError(400, "the request body must be a JSON object")
    try:
        return kind.model_validate(data)
    except ValidationError as error:
        raise ServeError(400, sentence(error)) from None


def sentence(error: ValidationError) -> str:
    """pydantic's errors as one message: each field, then what is wrong with it (the members
    of a union that all refused a value, as one list of what it may be)."""
    by_field: dict[str, list[Any]] = {}
    for item in error.errors(include_url=False):
        field = ".".join(str(part) for part in item["loc"] if not _union_member(part))
        by_field.setdefault(field, []).append(item)
    found = [_described(field, items) for field, items in by_field.items()]
    more = len(found) - SHOWN_ERRORS
    return "; ".join(found[:SHOWN_ERRORS]) + (f" (and {more} more)" if more > 0 else "") + "."


def _union_member(part) -> bool:
    """pydantic names the member of a union a value was tried as: str, list[str], Tool."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "none") or
                                      "[" in part or part[:1].isupper())


def _described(field: str, items: list[dict]) -> str:
    messages = list(dict.fromkeys(i["msg"].removeprefix("Value error, ").rstrip(".")
                                  for i in items))
    kinds = {i["type"] for i in items}
    if kinds == {"missing"}:
        return f"{field} is required"
    if len(messages) > 1:
        return f'"{field}" is none of what it may be: ' + ", or ".join(messages)
    if all(kind.endswith("_type") for kind in kinds):
        return f'"{field}" has the wrong type: {messages[0]}'
    return f'"{field}": {messages[0]}' if field else messages[0]


def body(kind: type[B]):
    """A route's parsed body, as a dependency: `request: Annotated[Kind, body(Kind)]`."""

    async def read(request: Request) -> B:
        limit = service_of(request).settings.max_body
        return parse(kind, await raw_body(request, limit))

    return Depends(read)


def documented(kind: type[Body]) -> dict:
    """openapi_extra for a route whose JSON body is kind (app.py publishes its schema)."""
    DOCUMENTED.append(kind)
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{kind.__name__}"}}}}}
