"""A reply's chunks as Ollama's API shapes them: what the runner is asked for (Call), and its
events (text, logprobs, the final counts) turned into message or response chunks, the
model's thinking and tool calls taken out of the text by the call's extractor."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any
from dataclasses import dataclass, field

from ...protocol import CompletionRequest
from ..library.entry import Entry
from ..web.errors import ServeError
from ..formats import Extractor
from .runners import RunnerError

DONE_REASONS = {0: "stop", 1: "length", 2: "stop"}


@dataclass
class Call:
    """What the runner is asked for, and how its text turns into Ollama's chunks."""
    entry: Entry
    body: CompletionRequest              # the runner's /completion body
    extractor: Extractor | None = None   # or a HarmonyExtractor (the same interface)
    chat: bool = False
    keep_context: bool = False           # generate: the final chunk carries `context`
    prompt_text: str = ""
    extra: dict = field(default_factory=dict)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="microseconds").replace("+00:00", "Z")


async def reply_chunks(call: Call, model: str, events, runner, arrived: int,
                       load_duration: int, failed: Callable[[RunnerError], ServeError]):
    """The chunks of the runner's events (an async iterator) for call; a runner's failure
    midway is a last chunk {"error", "status"} of failed(error) (a reply not streamed
    answers that status). arrived: the request's perf_counter_ns, for total_duration."""
    extractor = call.extractor
    pieces: list[str] = []
    try:
        async for event in events:
            if "error" in event:                # with the status the runner gave it
                yield {key: event[key] for key in ("error", "status") if key in event}
                return
            if event.get("done"):
                tail = extractor.finish() if extractor else ("", "", [])
                if any(tail):
                    yield chunk_of(call, model, *tail)
                done = chunk_of(call, model, "", "", [])
                done.update(done=True, done_reason=DONE_REASONS.get(event["done_reason"],
                                                                    "stop"),
                            total_duration=time.perf_counter_ns() - arrived,
                            load_duration=load_duration,
                            prompt_eval_count=event["prompt_eval_count"],
                            prompt_cached_count=event.get("prompt_cached_count", 0),
                            prompt_eval_duration=event["prompt_eval_duration"],
                            eval_count=event["eval_count"],
                            eval_duration=event["eval_duration"])
                if call.keep_context:
                    done["context"] = await runner.tokenize(call.prompt_text + "".join(pieces))
                yield done
                return
            text = event.get("content", "")
            pieces.append(text)
            content, thinking, calls = extractor.push(text) if extractor else (text, "", [])
            chunk = chunk_of(call, model, content, thinking, calls)
            if event.get("logprobs"):
                chunk["logprobs"] = [_with_bytes(entry) for entry in event["logprobs"]]
            if content or thinking or calls or "logprobs" in chunk:
                yield chunk
    except RunnerError as error:
        refusal = failed(error)
        yield {"error": str(refusal), "status": refusal.status}


def chunk_of(call: Call, model: str, content: str, thinking: str, calls: list) -> dict:
    """A chat's message chunk, or a generate's response chunk; not done."""
    chunk: dict[str, Any] = {"model": model, "created_at": now()}
    if call.chat:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if thinking:
            message["thinking"] = thinking
        if calls:
            message["tool_calls"] = calls
        chunk["message"] = message
    else:
        chunk["response"] = content
        if thinking:
            chunk["thinking"] = thinking
    chunk["done"] = False
    return chunk


def _with_bytes(entry: dict) -> dict:
    entry = dict(entry, bytes=list(entry["token"].encode()))
    entry["top_logprobs"] = [dict(t, bytes=list(t["token"].encode()))
                             for t in entry.get("top_logprobs", [])]
    return entry
