"""Ollama's API: bodies.py (its requests, which the service takes as the common form),
generate.py (/api/generate, /api/chat, /api/embed), manage.py (tags, show, ps, copy, delete,
pull, version), create.py (/api/create and blobs), modelfile.py (a model as a Modelfile)."""
