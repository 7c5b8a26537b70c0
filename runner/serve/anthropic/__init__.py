"""Anthropic's Messages API (Claude Code): bodies.py (the request and its translation into a
chat), routes.py (the reply whole or as its events, token counting)."""
