"""Mistral's format: [THINK] ... [/THINK], and calls after [TOOL_CALLS]: NAME[ARGS]{json}
or NAME[CALL_ID]ID[ARGS]{json} (v11 on), or a JSON array of calls (before)."""

from __future__ import annotations

import json
import secrets

from .calls import ALPHANUMERIC, closed_after, json_call
from .format import Format, register

MISTRAL_ID = 9                 # Mistral's templates take alphanumeric call ids of 9


def mistral_id() -> str:
    return "".join(secrets.choice(ALPHANUMERIC) for _ in range(MISTRAL_ID))


def mistral_calls(body: str) -> list[tuple] | None:
    """After [TOOL_CALLS]: NAME[ARGS]{json} or NAME[CALL_ID]ID[ARGS]{json} (v11 on), or a
    JSON array (or object) of {"name", "arguments", "id"} (before)."""
    text = body.strip()
    if text[:1] in ("[", "{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        calls = []
        for item in value if isinstance(value, list) else [value]:
            parsed = json_call(json.dumps(item)) if isinstance(item, dict) else None
            if parsed is None:
                return None
            calls.append((*parsed, item.get("id") or mistral_id()))
        return calls or None
    name, args_tag, arguments = text.partition("[ARGS]")
    if not args_tag:
        return None
    name, _, ident = name.partition("[CALL_ID]")
    parsed = json_call(json.dumps({"name": name.strip(), "arguments": "__"}).replace(
        '"__"', arguments.strip() or "{}"))
    return None if parsed is None else [(*parsed, ident.strip() or mistral_id())]


MISTRAL = register(Format(
    "mistral", lambda t: "[TOOL_CALLS]" in t or "[THINK]" in t,
    think=("[THINK]", "[/THINK]"), tool=("[TOOL_CALLS]", None),
    parse_call=mistral_calls, repair=closed_after("[ARGS]"),
    arguments_after=('"arguments"', '"parameters"', "[ARGS]"),
    call_text=lambda name, args: f"[TOOL_CALLS]{name}[ARGS]{args}"), rank=40)
