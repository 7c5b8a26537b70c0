"""Chat messages as every renderer takes them."""

from __future__ import annotations

ROLES = ("system", "user", "assistant", "tool", "developer")


def check_messages(messages: list[dict]) -> None:
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ROLES or not (
                isinstance(message.get("content"), str) or
                (message.get("content") is None and message.get("tool_calls"))):
            raise ValueError("Each message needs a role (system, user, assistant, tool) and a "
                             f"string content, not {message!r}.")
