"""POST /api/create, as Ollama's: a model from uploaded blobs (a GGUF and its mmproj, or a
Hugging Face checkpoint's safetensors, config and tokenizer files, converted here), or from
another model (whose template, system prompt, parameters, messages and license it
inherits), optionally quantized (`quantize`: one of the quantizer's types), with a
template, system prompt, parameters, messages a chat starts with, and a license. Progress
streams as statuses."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import gguf
from fastapi import APIRouter
from pyggml.gguf_reader import Header

from ...tokenizer.template import check_template
from .bodies import CreateRequest
from ..library.store import DIGEST
from .manage import _library_call, _respond, statuses
from ..web.reading import Served, body, documented
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
        _blob(library, name, digest)
        try:
            is_projector = await asyncio.to_thread(library.is_projector, digest.split(":")[1])
        except ValueError as error:
            raise ServeError(400, f"the file {name} is not a GGUF file: {error}") from None
        if is_projector:
            projector = projector or digest
        elif model is None:
            model = digest
        else:
            raise ServeError(400, "more than one model file was given")
    return model, projector


def _is_checkpoint(files: dict) -> bool:
    return any(name.endswith(".safetensors") for name in files)


def _run(*command: str) -> None:
    """A conversion or quantization in a process of its own: the server never loads ggml
    (test_manage.py), and a failure is its last line."""
    done = subprocess.run([sys.executable, "-m", "runner", *command], capture_output=True,
                          text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise ValueError(lines[-1] if lines else f"exit status {done.returncode}")


def _convert(library, files: dict) -> str:
    """A checkpoint's files (blobs under their names) converted to a GGUF blob (f16)."""
    work = library.scratch()
    try:
        for name, digest in files.items():
            if Path(name).name != name or name.startswith(".") or \
                    not name.endswith(CHECKPOINT_SUFFIXES):
                raise ValueError(f"{name!r} is not a checkpoint file name (safetensors, json, "
                                 "tokenizer files, without folders).")
            (work / name).symlink_to(_blob(library, name, digest))
        _run("convert", str(work), "-o", str(work / "model.gguf"), "--outtype", "f16")
        return "sha256:" + library.add_blob(work / "model.gguf")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _quantize(library, source: Path, type_name: str) -> str:
    work = library.scratch()
    try:
        _run("quantize", str(source), str(work / "model.gguf"), "--type", type_name)
        return "sha256:" + library.add_blob(work / "model.gguf")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _file_type(path: Path) -> str:
    types = {gguf.GGMLQuantizationType(info.type).name for info in Header(path).tensors
             if len(info.ne) > 1}
    return "/".join(sorted(types)) or "F32"


@api.post("/api/create", openapi_extra=documented(CreateRequest))
async def create(request: CreateBody, service: Served):
    library = service.library
    checkpoint = _is_checkpoint(request.files)
    found = (None, None) if checkpoint else await _gguf_files(library, request.files)
    model: str | None = found[0]
    projector: str | Path | None = found[1]
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
            model = await _library_call(_convert, library, request.files,
                                        invalid="the checkpoint cannot be converted: {}")
        yield {"status": "parsing GGUF"}
        if request.quantize:
            source = Path(model) if not DIGEST.match(model) else \
                library.blobs / f"sha256-{model.split(':')[1]}"
            kind = await asyncio.to_thread(_file_type, source)
            yield {"status": f"quantizing {kind} model to {request.quantize.upper()}"}
            model = await _library_call(_quantize, library, source, request.quantize.upper(),
                                        invalid="the model cannot be quantized: {}")
        await _library_call(library.create, request.model, model, template, system,
                            parameters, projector, messages, license,
                            invalid="the file is not a model this server reads: {}")
        yield {"status": "writing manifest"}
        yield {"status": "success"}

    return await _respond(statuses(request.stream, steps()))
