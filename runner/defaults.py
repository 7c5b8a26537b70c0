"""The defaults every entry point shares: the Python API (`runner.load`), `run`, the runner
subprocess (`python -m runner`, its /load) and the server (`serve`) read them from here, so
that one model gives the same text whichever way it is started."""

CONTEXT = 4096               # tokens one sequence holds
BATCH = 512                  # tokens a prompt is evaluated by at a time
PARALLEL = 1                 # sequences served at once
KV_CACHE_TYPE = "f16"


def flash_attention(choice, cache_type: str = KV_CACHE_TYPE) -> bool:
    """Flash attention for a choice of on/off (True/False) or auto (None): on, as llama.cpp
    decides on backends that support it (the CPU does; a GPU declining it for a head size
    computes that layer's attention on the CPU), but for an f32 cache, which works without
    it only."""
    if choice in ("on", "off"):
        return choice == "on"
    if choice in (None, "auto"):
        return cache_type != "f32"
    return bool(choice)
