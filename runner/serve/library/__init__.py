"""The models a server offers: store.py (the store `pull` fills and /api/create adds to),
entry.py (one model: its file, manifest and capabilities), catalog.py (what a catalog name
means, as in Ollama's library)."""
