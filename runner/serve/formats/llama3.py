"""Llama 3's format: a reply that is a bare JSON object {"name", "parameters"} is a call
(after <|python_tag|>, if any)."""

from __future__ import annotations

from .format import Format, register

LLAMA3 = register(Format(
    "llama3", lambda t: "<|start_header_id|>" in t and "parameters" in t, bare_json=True,
    call_text=lambda name, args: f'{{"name": "{name}", "parameters": {args}}}'), rank=70)
