"""OpenAI's Responses API over the same service (what Codex and the `openai` clients'
`responses` speak): POST /v1/responses, whole or streamed as its events (response.created,
in_progress, output items added and done, reasoning_text and output_text deltas with their
content parts, function-call argument deltas (a custom tool's: its input's),
response.completed or response.incomplete with usage). Stateless: previous_response_id is
refused with a 400 (as Ollama refuses it), so a client sends the whole conversation; nothing
is stored."""

from __future__ import annotations

import json
import secrets
import time
from typing import Annotated

from fastapi import APIRouter, Request

from ..openai.routes import error_body
from ..web.reading import Served, body, documented
from ..web.replies import StreamReply, folded, server_events
from .bodies import NamedChoice, ResponsesRequest
from ..service.core import ServeError


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def _usage(done: dict) -> dict:
    prompt, output = done.get("prompt_eval_count", 0), done.get("eval_count", 0)
    cached = done.get("prompt_cached_count", 0)
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + output}


def _call_item(call: dict, free_form: set[str]) -> dict:
    """A function_call item, or a custom_tool_call item for a tool in free_form (its input
    the text the model wrote); one the length cut is incomplete, its arguments as written."""
    cut = bool(call.get("cut"))
    arguments, name = call["function"].get("arguments", {}), call["function"]["name"]
    item = {"call_id": call.get("id") or _id("call"), "name": name,
            "status": "incomplete" if cut else "completed"}
    if name in free_form:
        text = arguments.get("input") if isinstance(arguments, dict) else arguments
        return {"type": "custom_tool_call", "id": _id("ctc"), **item,
                "input": text if isinstance(text, str) else json.dumps(text)}
    return {"type": "function_call", "id": _id("fc"), **item,
            "arguments": arguments if cut else json.dumps(arguments)}


def _free_form(request: ResponsesRequest) -> set[str]:
    """The names of the request's custom tools."""
    return {tool.name for tool in request.tools or [] if tool.free_form}


def _text_item(kind: str, text: str, status: str = "completed") -> dict:
    if kind == "reasoning":
        return {"type": "reasoning", "id": _id("rs"), "summary": [],
                "content": [{"type": "reasoning_text", "text": text}], "status": status}
    return {"type": "message", "id": _id("msg"), "status": status, "role": "assistant",
            "content": [_text_part(text)]}


def _text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


class Shell:
    """The response object around the output, as each event and the final reply carry it."""

    def __init__(self, request: ResponsesRequest):
        self.request, self.ident, self.created = request, _id("resp"), int(time.time())

    def __call__(self, output: list, done: dict | None) -> dict:
        request = self.request
        cut = done is not None and done.get("done_reason") == "length"
        return {
            "id": self.ident, "object": "response", "created_at": self.created,
            "status": "in_progress" if done is None else "incomplete" if cut else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "model": request.model, "output": output, "error": None,
            "instructions": request.instructions, "max_output_tokens": request.max_output_tokens,
            "parallel_tool_calls": request.parallel_tool_calls, "previous_response_id": None,
            "temperature": request.temperature, "top_p": request.top_p,
            "tool_choice": request.tool_choice.model_dump()
            if isinstance(request.tool_choice, NamedChoice) else request.tool_choice or "auto",
            "tools": [t.model_dump(exclude_none=True) for t in request.tools or []],
            "reasoning": request.reasoning.model_dump() if request.reasoning else None,
            "text": {"format": {"type": "text"}}, "truncation": "disabled", "store": False,
            "metadata": {}, "usage": _usage(done) if done else None}


class Events:
    """Native chunks as the Responses API's events: an output item opens when its kind of
    output starts (reasoning, the message, each function call) and is done when another
    kind comes; every event carries its sequence number."""

    def __init__(self, shell: Shell):
        self.shell, self.sequence = shell, 0
        self.output: list[dict] = []
        self.free_form = _free_form(shell.request)
        self.open: tuple[str, dict, str] | None = None      # (kind, item, text so far)

    def event(self, kind: str, **data) -> str:
        payload = {"type": kind, "sequence_number": self.sequence, **data}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(payload)}\n\n"

    def start(self) -> list[str]:
        response = self.shell([], None)
        return [self.event("response.created", response=response),
                self.event("response.in_progress", response=response)]

    def _close(self) -> list[str]:
        if self.open is None:
            return []
        kind, item, text = self.open
        self.open, index, out = None, len(self.output), []
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if kind == "reasoning":
            item = dict(item, content=[{"type": "reasoning_text", "text": text}])
            out.append(self.event("response.reasoning_text.done", **where, text=text))
        else:
            item = dict(item, content=[_text_part(text)])
            out += [self.event("response.output_text.done", **where, text=text, logprobs=[]),
                    self.event("response.content_part.done", **where, part=_text_part(text))]
        item["status"] = "completed"
        self.output.append(item)
        return out + [self.event("response.output_item.done", output_index=index, item=item)]

    def _text(self, kind: str, delta: str) -> list[str]:
        out = []
        if self.open is None or self.open[0] != kind:
            out += self._close()
            item = _text_item(kind, "", "in_progress")
            self.open = (kind, item, "")
            out.append(self.event("response.output_item.added", output_index=len(self.output),
                                  item=item))
            if kind == "message":
                out.append(self.event("response.content_part.added", item_id=item["id"],
                                      output_index=len(self.output), content_index=0,
                                      part=_text_part("")))
        kind, item, text = self.open
        self.open = (kind, item, text + delta)
        where = {"item_id": item["id"], "output_index": len(self.output), "content_index": 0}
        if kind == "reasoning":
            return out + [self.event("response.reasoning_text.delta", **where, delta=delta)]
        return out + [self.event("response.output_text.delta", **where, delta=delta,
                                 logprobs=[])]

    def _call(self, call: dict) -> list[str]:
        out, index = self._close(), len(self.output)
        item = _call_item(call, self.free_form)
        field, events = ("input", "custom_tool_call_input") if "input" in item else \
            ("arguments", "function_call_arguments")
        out.append(self.event("response.output_item.added", output_index=index,
                              item=dict(item, **{field: ""}, status="in_progress")))
        where = {"item_id": item["id"], "output_index": index}
        out += [self.event(f"response.{events}.delta", **where, delta=item[field]),
                self.event(f"response.{events}.done", **where, **{field: item[field]},
                           name=item["name"])]
        self.output.append(item)
        return out + [self.event("response.output_item.done", output_index=index, item=item)]

    def chunk(self, chunk: dict) -> list[str]:
        message, out = chunk.get("message", {}), []
        if message.get("thinking"):
            out += self._text("reasoning", message["thinking"])
        if message.get("content"):
            out += self._text("message", message["content"])
        for call in message.get("tool_calls") or []:
            out += self._call(call)
        if chunk.get("done"):
            out += self._close()
            response = self.shell(self.output, chunk)
            kind = "response.completed" if response["status"] == "completed" else \
                "response.incomplete"
            out.append(self.event(kind, response=response))
        return out


def _sse(stream, shell: Shell) -> StreamReply:
    events = Events(shell)

    async def start() -> list[str]:
        return events.start()

    return server_events(stream, start, events.chunk, lambda message: events.event(
        "error", **error_body(500, message)["error"]))


api = APIRouter()
ResponsesBody = Annotated[ResponsesRequest, body(ResponsesRequest)]


@api.post("/v1/responses", openapi_extra=documented(ResponsesRequest))
async def responses(request: ResponsesBody, service: Served, http: Request):
    try:
        native = request.native()
    except ValueError as error:
        raise ServeError(400, str(error)) from None
    shell = Shell(request)
    stream = await service.chat(native, early=request.stream, budget=request.thinking_budget())
    if request.stream:
        return _sse(stream, shell)
    done = await folded(stream, http)
    reply, output = done["message"], []
    if reply.get("thinking"):
        output.append(_text_item("reasoning", reply["thinking"]))
    if reply.get("content"):
        output.append(_text_item("message", reply["content"]))
    output += [_call_item(call, _free_form(request)) for call in reply.get("tool_calls") or []]
    return shell(output, done)
