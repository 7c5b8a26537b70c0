"""OpenAI's /v1/audio/transcriptions over the same service: a multipart upload (file, model,
language, prompt, response_format, temperature), cut into 30 s chunks, each a chat turn with
the clip as the model's audio (Ollama carries audio with the images), their texts joined."""

from __future__ import annotations

import base64

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from ...multimodal.sound import AudioError
from ...multimodal.transcribe import TOKENS_PER_CHUNK, prompt, wav_chunks
from ..ollama.bodies import ChatRequest, Message, Options
from ..web.reading import Served
from ..web.replies import folded
from ..service.core import ServeError

FORMATS = ("json", "text")


api = APIRouter()


@api.post("/v1/audio/transcriptions")
async def transcriptions(request: Request, service: Served):
    form = await _form(request)
    name = form.get("model")
    if not isinstance(name, str) or not name:
        raise ServeError(400, "model is required")
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        raise ServeError(400, "file is required (a sound file, sent as multipart form "
                              "data)")
    response_format = form.get("response_format") or "json"
    if response_format not in FORMATS:
        raise ServeError(400, f"response_format must be one of {', '.join(FORMATS)}")
    if "audio" not in (await service.entry(name)).capabilities():
        raise ServeError(400, f'"{name}" does not support audio')
    try:
        chunks = wav_chunks(await upload.read())
    except AudioError as error:
        raise ServeError(400, str(error)) from None
    options = Options(temperature=_number(form.get("temperature"), 0.0),
                      num_predict=TOKENS_PER_CHUNK)
    text = prompt(form.get("language") or None)
    if form.get("prompt"):
        text = f"{form['prompt']}\n{text}"
    pieces = []
    for chunk in chunks:
        stream = await service.chat(ChatRequest(
            model=name, stream=False, options=options,
            messages=[Message(role="user", content=text,
                              images=[base64.b64encode(chunk).decode()])]))
        pieces.append((await folded(stream, request))["message"].get("content", "").strip())
    transcript = " ".join(p for p in pieces if p)
    if response_format == "text":
        return PlainTextResponse(transcript)
    return {"text": transcript}



async def _form(request: Request):
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ServeError(400, "a transcription request is multipart/form-data")
    try:
        return await request.form()
    except Exception as error:                  # a malformed body is the client's fault
        raise ServeError(400, f"the form could not be read: {error}") from None


def _number(value, default: float) -> float:
    if value in (None, ""):
        return default
    try:
        return float(value)
    except ValueError:
        raise ServeError(400, f"temperature must be a number, not {value!r}") from None
