"""The service every wire API calls: core.py (generate, chat, embed as Ollama defines them),
options.py (a request's options layered, the server's settings), scheduler.py (which runner
serves a request: loads, leases, evictions), runners.py (one runner subprocess and the
runner protocol's client), chunks.py and stream.py (a reply's chunks and their lease)."""
