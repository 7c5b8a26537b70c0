"""OpenAI's Responses API (Codex): bodies.py (the request and its translation into a chat),
routes.py (the reply whole or as its events)."""
