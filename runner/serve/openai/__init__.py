"""OpenAI's API: bodies.py (chat completions, completions, embeddings), routes.py (its
routes over the service), choices.py (n choices), transcriptions.py (audio)."""
