"""The text a model reads and writes: prompts.py (the chat template rendered over messages
and tools), parsers.py (each family's thinking and tool-call format, recognized from its
template, and the extractor that takes them out of a streaming reply), calls.py (each
family's call read back), harmony.py (gpt-oss's channels), fim.py (fill-in-the-middle)."""
