"""Fill-in-the-middle: a generate request's `suffix` for code models whose vocabulary has
FIM tokens (the GGUF's tokenizer.ggml.fim_*_token_id, else the token texts llama.cpp looks
for), written prefix-suffix-middle as llama.cpp's /infill and Ollama's coder templates write
it: <FIM_PRE>prompt<FIM_SUF>suffix<FIM_MID>, the model then writes the middle."""

from __future__ import annotations

# part -> (its GGUF key, the texts llama.cpp's vocabulary loader takes for it)
PARTS = {
    "pre": ("tokenizer.ggml.fim_pre_token_id",
            ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
             "▁<PRE>", "<|code_prefix|>")),
    "suf": ("tokenizer.ggml.fim_suf_token_id",
            ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
             "▁<SUF>", "<|code_suffix|>")),
    "mid": ("tokenizer.ggml.fim_mid_token_id",
            ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
             "▁<MID>", "<|code_middle|>")),
}


def fim_tokens(metadata: dict) -> dict[str, str] | None:
    """The FIM tokens' texts by part, or None unless the vocabulary has all three."""
    tokens = metadata.get("tokenizer.ggml.tokens") or []
    found = {}
    for part, (key, texts) in PARTS.items():
        index = metadata.get(key)
        if isinstance(index, int) and 0 <= index < len(tokens):
            found[part] = tokens[index]
        else:
            found[part] = next((t for t in texts if t in _token_set(tokens)), None)
    return found if all(found.values()) else None


def _token_set(tokens: list) -> frozenset:
    """The vocabulary as a set, made once per file's token list (the last one asked)."""
    if _last.get("tokens") is not tokens:
        _last.update(tokens=tokens, set=frozenset(tokens))
    return _last["set"]


_last: dict = {}


def fim_prompt(tokens: dict[str, str], prompt: str, suffix: str) -> str:
    return f"{tokens['pre']}{prompt}{tokens['suf']}{suffix}{tokens['mid']}"
