"""Anthropic's Messages API over the same service (what Claude Code and the `anthropic`
clients speak): POST /v1/messages, streamed as its events (message_start, content blocks
started, their text_delta, thinking_delta and input_json_delta, stopped, message_delta with
the stop reason and usage, message_stop) or whole, and POST /v1/messages/count_tokens.
Errors take Anthropic's shape: {"type": "error", "error": {"type", "message"}}."""

from __future__ import annotations

import json
import secrets
from typing import Annotated

from fastapi import APIRouter, Request

from .bodies import CountTokensRequest, MessagesRequest, tool_input
from ..web.reading import Served, body, documented
from ..web.replies import StreamReply, folded, server_events
from ..service.core import ServeError

PREFIX = "/v1/messages"
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 413: "request_too_large",
               429: "rate_limit_error", 503: "overloaded_error"}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


def error_body(status: int, message: str) -> dict:
    return {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"),
                                       "message": message}}


def _native(request: CountTokensRequest, **fields):
    try:
        return request.native(**fields)
    except ValueError as error:
        raise ServeError(400, str(error)) from None


def _stop_reason(done: dict, calls: bool) -> str:
    """tool_use where the reply called tools and was not cut (max_tokens)."""
    reason = done.get("done_reason") or ""
    return "tool_use" if calls and reason != "length" else STOP_REASONS.get(reason, "end_turn")


def _finished(calls) -> list[dict]:
    """The calls a reply finished (one the length cut is no tool_use: max_tokens says so)."""
    return [call for call in calls or [] if not call.get("cut")]


def _usage(done: dict) -> dict:
    """Anthropic counts input apart from what was read from its cache."""
    cached = done.get("prompt_cached_count", 0)
    return {"input_tokens": done.get("prompt_eval_count", 0) - cached,
            "cache_read_input_tokens": cached, "output_tokens": done.get("eval_count", 0)}


def _message(ident: str, model: str, content: list, done: dict | None) -> dict:
    calls = any(block["type"] == "tool_use" for block in content)
    return {"id": ident, "type": "message", "role": "assistant", "model": model,
            "content": content,
            "stop_reason": None if done is None else _stop_reason(done, calls),
            "stop_sequence": None,
            "usage": _usage(done) if done else {"input_tokens": 0, "output_tokens": 0}}


def _call_block(call: dict) -> dict:
    return {"type": "tool_use", "id": call.get("id") or f"toolu_{secrets.token_hex(12)}",
            "name": call["function"]["name"],
            "input": tool_input(call["function"].get("arguments", {}))}


class Events:
    """Native chunks as the Messages API's events: a block opens when its kind of output
    starts (thinking, text, each tool call) and closes when another kind comes."""

    def __init__(self, ident: str, model: str):
        self.ident, self.model = ident, model
        self.index, self.calls = -1, False
        self.open: str | None = None           # the kind of the block being written

    def event(self, kind: str, data: dict) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    def start(self, input_tokens: int) -> str:
        message = _message(self.ident, self.model, [], None)
        message["usage"]["input_tokens"] = input_tokens
        return self.event("message_start", {"message": message})

    def _switch(self, kind: str | None, block: dict | None = None) -> list[str]:
        out = []
        if self.open is not None:
            out.append(self.event("content_block_stop", {"index": self.index}))
            self.open = None
        if kind is not None:
            self.index += 1
            self.open = kind
            out.append(self.event("content_block_start",
                                  {"index": self.index, "content_block": block}))
        return out

    def chunk(self, chunk: dict) -> list[str]:
        message, out = chunk.get("message", {}), []
        if message.get("thinking"):
            if self.open != "thinking":
                out += self._switch("thinking", {"type": "thinking", "thinking": "",
                                                 "signature": ""})
            out.append(self.event("content_block_delta", {"index": self.index, "delta": {
                "type": "thinking_delta", "thinking": message["thinking"]}}))
        if message.get("content"):
            if self.open != "text":
                out += self._switch("text", {"type": "text", "text": ""})
            out.append(self.event("content_block_delta", {"index": self.index, "delta": {
                "type": "text_delta", "text": message["content"]}}))
        for call in _finished(message.get("tool_calls")):
            block = _call_block(call)
            arguments = json.dumps(block.pop("input"))
            out += self._switch("tool_use", dict(block, input={}))
            out.append(self.event("content_block_delta", {"index": self.index, "delta": {
                "type": "input_json_delta", "partial_json": arguments}}))
            self.calls = True
        if chunk.get("done"):
            out += self._switch(None)
            out.append(self.event("message_delta", {
                "delta": {"stop_reason": _stop_reason(chunk, self.calls),
                          "stop_sequence": None},
                "usage": _usage(chunk)}))
            out.append(self.event("message_stop", {}))
        return out


def _sse(stream, ident: str, model: str) -> StreamReply:
    events = Events(ident, model)

    async def start() -> list[str]:
        try:
            counted = await stream.prompt_tokens()
        except Exception:                   # noqa: BLE001 - a count is not worth the reply
            counted = 0
        return [events.start(counted)]

    return server_events(stream, start, events.chunk, lambda message: events.event(
        "error", {"error": error_body(500, message)["error"]}), events.event("ping", {}))


api = APIRouter()
MessagesBody = Annotated[MessagesRequest, body(MessagesRequest)]
CountTokensBody = Annotated[CountTokensRequest, body(CountTokensRequest)]


@api.post(PREFIX, openapi_extra=documented(MessagesRequest))
async def messages(request: MessagesBody, service: Served, http: Request):
    native = _native(request, options=request.options())
    ident = f"msg_{secrets.token_hex(12)}"
    stream = await service.chat(native, early=request.stream, budget=request.thinking_budget())
    if request.stream:
        return _sse(stream, ident, request.model)
    done = await folded(stream, http)
    reply, content = done["message"], []
    if reply.get("thinking"):
        content.append({"type": "thinking", "thinking": reply["thinking"], "signature": ""})
    if reply.get("content"):
        content.append({"type": "text", "text": reply["content"]})
    content += [_call_block(call) for call in _finished(reply.get("tool_calls"))]
    return _message(ident, request.model, content, done)


@api.post(PREFIX + "/count_tokens", openapi_extra=documented(CountTokensRequest))
async def count_tokens(request: CountTokensBody, service: Served):
    return {"input_tokens": await service.prompt_tokens(_native(request))}
