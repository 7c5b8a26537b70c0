"""POST /api/create, as Ollama's: a model from uploaded blobs (a GGUF and its mmproj, or a
Hugging Face checkpoint's safetensors, config and tokenizer files, converted here), or from
another model (whose template, system prompt, parameters, messages and license it
inherits), optionally quantized (`quantize`: one of the quantizer's types), with a
template, system prompt, parameters, messages a chat starts with, and a license. Progress
streams as statuses."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Annotated

import gguf
from fastapi import APIRouter, Request
from pyggml.gguf_reader import Header

from ...tokenizer.template import check_template
from .bodies import CreateRequest
from ..library.child import ChildFailed, bounds_for, run_bounded
from ..library.store import DIGEST, normalize
from .manage import _library_call, statuses
from ..web.reading import Served, body, documented
from ..web.replies import unless_gone
from ..service.core import ServeError

CHECKPOINT_SUFFIXES = (".safetensors", ".json", ".model", ".txt", ".jinja", ".py")
api = APIRouter()
CreateBody = Annotated[CreateRequest, body(CreateRequest)]


def _blob(library, name: str, digest) -> Path:
    found = DIGEST.match(str(digest))
    if found is None or not library.has_blob(found.group(1)):
        raise ServeError(400, f"blob {digest} of {name} not found; upload it with POST "
                              "/api/blobs/<digest> first")
    return library.blobs / f"sha256-{found.group(1)}"


async def _gguf_files(library, files: dict) -> tuple[str | None, str | None]:
    """The model's and the projector's blob digests among GGUF files (an mmproj file,
    general.architecture clip, is the projector, as Ollama sorts them)."""
    model = projector = None
    for name, digest in files.items():
        blob = _blob(library, name, digest)
        try:
            is_projector = await asyncio.to_thread(library.is_projector,
                                                   blob.name.removeprefix("sha256-"))
        except ValueError as error:                   # named by its name, not the store's path
            raise ServeError(400, f"The file {name} cannot be read: "
                                  f"{str(error).replace(str(blob), name)}") from None
        if is_projector:
            projector = projector or digest
        elif model is None:
            model = digest
        else:
            raise ServeError(400, "more than one model file was given")
    return model, projector


def _is_checkpoint(files: dict) -> bool:
    return any(name.endswith(".safetensors") for name in files)


def _checkpoint_blobs(library, files: dict) -> dict[str, Path]:
    """A checkpoint's files: name -> its blob, each name a plain file name of a kind a
    checkpoint holds."""
    for name in files:
        if Path(name).name != name or name.startswith(".") or \
                not name.endswith(CHECKPOINT_SUFFIXES):
            raise ServeError(400, f"{name!r} is not a checkpoint file name (safetensors, json, "
                                  "tokenizer files, without folders).")
    return {name: _blob(library, name, digest) for name, digest in files.items()}


async def _convert(library, blobs: dict[str, Path]) -> str:
    """A checkpoint's files (blobs under their names) converted to a GGUF blob (f16), in a
    bounded child (library/child.py)."""
    work = library.scratch()
    try:
        for name, blob in blobs.items():
            (work / name).symlink_to(blob)
        size = sum(blob.stat().st_size for blob in blobs.values())
        await _bounded(["convert", str(work), "-o", str(work / "model.gguf"), "--outtype",
                        "f16"], size, "The checkpoint cannot be converted.")
        return "sha256:" + await asyncio.to_thread(library.add_blob, work / "model.gguf")
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _quantize(library, source: Path, type_name: str) -> str:
    work = library.scratch()
    try:
        await _bounded(["quantize", str(source), str(work / "model.gguf"), "--type",
                        type_name], source.stat().st_size, "The model cannot be quantized.")
        return "sha256:" + await asyncio.to_thread(library.add_blob, work / "model.gguf")
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _bounded(command: list[str], input_bytes: int, refusal: str) -> None:
    try:
        await run_bounded(command, bounds_for(input_bytes))
    except ChildFailed as failed:
        raise ServeError(400, f"{refusal} {failed}") from None


def _file_type(path: Path) -> str:
    types = {gguf.GGMLQuantizationType(info.type).name for info in Header(path).tensors
             if len(info.ne) > 1}
    return "/".join(sorted(types)) or "F32"


@api.post("/api/create", openapi_extra=documented(CreateRequest))
async def create(request: CreateBody, service: Served, http: Request):
    """A conversion or quantization is stopped when the client leaves, streaming (the
    stream is cancelled) or not (unless_gone)."""
    library = service.library
    try:
        normalize(request.model)                       # before any work is done for it
    except ValueError as error:
        raise ServeError(400, str(error)) from None
    if request.adapters:
        raise ServeError(400, "LoRA adapters ('adapters') are not supported by this server; "
                              "merge the adapter into the model's weights and create from "
                              "those.")
    checkpoint = _is_checkpoint(request.files)
    blobs = _checkpoint_blobs(library, request.files) if checkpoint else {}
    found = (None, None) if checkpoint else await _gguf_files(library, request.files)
    model: str | None = found[0]
    projector: str | Path | None = found[1]
    if request.source and (checkpoint or model is not None):
        raise ServeError(400, "Give the model either by 'from' or by 'files', not both "
                              "('files' may add a projector to a model 'from' names).")
    template, system = request.template, request.system
    parameters = request.parameters.given() if request.parameters else {}
    messages = None if request.messages is None else \
        [m.for_template() for m in request.messages]            # [] clears inherited ones
    license = "\n".join(request.license) if isinstance(request.license, list) \
        else request.license
    if model is None and not checkpoint:
        if not request.source:
            raise ServeError(400, "the files hold no model, only a projector")
        entry = await service.entry(request.source)          # inherited, as Ollama does
        model, projector = str(entry.path), projector or entry.projector
        template = entry.template if template is None else template
        system = entry.system if system is None else system
        parameters = {**entry.parameters, **parameters}
        messages = entry.messages if messages is None else messages
        license = entry.license if license is None else license
    if template:
        try:
            check_template(template)
        except ValueError as error:
            raise ServeError(400, str(error)) from None

    async def steps():
        nonlocal model
        if checkpoint:
            yield {"status": "converting model"}
            model = await _convert(library, blobs)
        yield {"status": "parsing GGUF"}
        if request.quantize:
            source = Path(model) if not DIGEST.match(model) else \
                library.blobs / f"sha256-{model.split(':')[1]}"
            kind = await asyncio.to_thread(_file_type, source)
            yield {"status": f"quantizing {kind} model to {request.quantize.upper()}"}
            model = await _quantize(library, source, request.quantize.upper())
        await _library_call(library.create, request.model, model, template, system,
                            parameters, projector, messages, license,
                            invalid="the file is not a model this server reads: {}")
        yield {"status": "writing manifest"}
        yield {"status": "success"}

    if request.stream:
        return statuses(True, steps())
    return await unless_gone(http, statuses(False, steps()))
