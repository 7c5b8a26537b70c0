"""The vocabulary as GGUF metadata describes it (keys as llama.cpp's converter writes them)."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field


class TokenType(enum.IntEnum):
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


# tokenizer.ggml.model (each has a backend in __init__.BACKENDS) -> whether BOS is added
# when the file does not say
DEFAULT_ADD_BOS = {"llama": True, "gpt2": False, "bert": True, "gemma4": True, "t5": False}
# models that add EOS when the file does not say, and that put a space before the text
DEFAULT_ADD_EOS = {"t5"}
DEFAULT_SPACE_PREFIX = {"llama", "t5"}
# models that always add BOS whatever the file says (llama.cpp's workaround for Gemma 4
# files that say false)
ALWAYS_ADD_BOS = {"gemma4"}
# byte-level BPE pre-tokenizers after which llama.cpp adds BOS when the file does not say
PRE_ADD_BOS = {"llama3", "llama-bpe", "llama-v3", "tekken", "falcon3", "falcon-h1", "pixtral",
               "midm-2.0", "lfm2", "chameleon", "jina-v5-nano"}
# token ids the model must never generate (Gemma 4 12B's, from its generation_config.json):
# an array of integers; llama.cpp drops the ids outside the vocabulary, and so do we
SUPPRESS_TOKENS = "tokenizer.ggml.suppress_tokens"


@dataclass
class Vocab:
    model: str                       # tokenizer.ggml.model, a key of DEFAULT_ADD_BOS
    pre: str                         # tokenizer.ggml.pre: the pre-tokenizer's name
    tokens: list[str]
    types: list[int]
    scores: list[float] | None
    merges: list[str]
    bos: int | None
    eos: int | None
    eot: int | None
    unk: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    remove_extra_whitespaces: bool = False
    charsmap: bytes = b""             # SentencePiece's precompiled normalization map (t5)
    eog: set[int] = field(default_factory=set)   # ids that end generation
    suppressed: tuple[int, ...] = ()   # ids never generated (the sampler's mask)

    @classmethod
    def from_metadata(cls, meta: dict) -> "Vocab":
        model = meta.get("tokenizer.ggml.model")
        if model not in DEFAULT_ADD_BOS:
            raise ValueError(f"Unsupported tokenizer model {model!r}; supported: "
                             f"{', '.join(DEFAULT_ADD_BOS)}.")
        tokens = meta["tokenizer.ggml.tokens"]
        types = meta.get("tokenizer.ggml.token_type") or [TokenType.NORMAL] * len(tokens)

        def token_id(key: str) -> int | None:
            value = meta.get(f"tokenizer.ggml.{key}_token_id")
            return int(value) if value is not None and 0 <= int(value) < len(tokens) else None

        pre = meta.get("tokenizer.ggml.pre", "default")
        vocab = cls(
            model=model, pre=pre, tokens=tokens,
            types=[int(t) for t in types], scores=meta.get("tokenizer.ggml.scores"),
            merges=meta.get("tokenizer.ggml.merges") or [], bos=token_id("bos"),
            eos=token_id("eos"), eot=token_id("eot"), unk=token_id("unknown"),
            add_bos=model in ALWAYS_ADD_BOS or
            bool(meta.get("tokenizer.ggml.add_bos_token",
                          DEFAULT_ADD_BOS[model] or pre in PRE_ADD_BOS)),
            add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", model in DEFAULT_ADD_EOS)),
            add_space_prefix=bool(meta.get("tokenizer.ggml.add_space_prefix",
                                           model in DEFAULT_SPACE_PREFIX)),
            remove_extra_whitespaces=bool(meta.get("tokenizer.ggml.remove_extra_whitespaces",
                                                   False)),
            charsmap=bytes(int(b) & 0xFF for b in
                           meta.get("tokenizer.ggml.precompiled_charsmap") or ()),
            suppressed=suppressed_ids(meta, len(tokens)))
        vocab.eog = {t for t in (vocab.eos, vocab.eot) if t is not None} | {
            int(t) for t in meta.get("tokenizer.ggml.eos_token_ids") or ()  # Ollama's key
            if 0 <= int(t) < len(tokens)}
        for i, text in enumerate(tokens):
            if vocab.types[i] == TokenType.CONTROL and text in END_OF_GENERATION:
                vocab.eog.add(i)
        ids = {text: i for i, text in enumerate(tokens) if text in HARMONY_ENDS | {"<|end|>"}}
        if HARMONY_ENDS <= set(ids):        # gpt-oss: a message's end is not the reply's
            vocab.eog = (vocab.eog - {ids.get("<|end|>")}) | {ids[t] for t in HARMONY_ENDS}
        return vocab

    def ids_of_type(self, *kinds: TokenType) -> list[int]:
        return [i for i, t in enumerate(self.types) if t in kinds]

    def splitter(self, *kinds: TokenType) -> re.Pattern | None:
        """A pattern whose split() keeps the tokens of kinds written in a text as separate
        pieces (the odd ones), longest first; None when there are none."""
        texts = sorted((self.tokens[i] for i in self.ids_of_type(*kinds) if self.tokens[i]),
                       key=len, reverse=True)
        return re.compile("(" + "|".join(map(re.escape, texts)) + ")") if texts else None


def suppressed_ids(meta: dict, size: int) -> tuple[int, ...]:
    """SUPPRESS_TOKENS's ids inside a vocabulary of size, sorted, each once."""
    found = meta.get(SUPPRESS_TOKENS)
    if found is None:
        return ()
    if not isinstance(found, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                              for t in found):
        raise ValueError(f"{SUPPRESS_TOKENS} must be an array of token ids, not "
                         f"{found!r:.200}.")
    return tuple(sorted({t for t in found if 0 <= t < size}))


# harmony's (gpt-oss's) reply ends: a final answer and a tool call. Its <|end|> closes one
# message of several (thinking, then the answer), so where these two exist it does not end
# generation (llama.cpp's rule for o200k_harmony)
HARMONY_ENDS = {"<|return|>", "<|call|>"}
# control tokens that end a turn in the chat formats we know (llama.cpp adds the same set)
END_OF_GENERATION = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                     "<|end_of_text|>", "<EOT>", "<|eom_id|>", "<turn|>"}
