"""Byte-level BPE (tokenizer.ggml.model = gpt2) on the `tokenizers` library.

The pre-tokenizer is chosen by tokenizer.ggml.pre: a sequence of regular expressions, each
splitting the pieces the previous one left, as llama.cpp applies them (llama-vocab.cpp).
"""

from __future__ import annotations

from functools import lru_cache

from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers

from .vocab import TokenType, Vocab

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
         r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# llama.cpp's forms of Mistral's (tekken) and GPT-4o's expressions: an upper-case letter is a
# letter that is not a-z, a lower-case one a letter that is not A-Z
UPPER, LOWER = r"((?=[\p{L}])([^a-z]))", r"((?=[\p{L}])([^A-Z]))"
CONTRACTION = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER}*{LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{UPPER}+{LOWER}*|\p{{N}}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{UPPER}*{LOWER}+{CONTRACTION}?"
         rf"|[^\r\n\p{{L}}\p{{N}}]?{UPPER}+{LOWER}*{CONTRACTION}?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHATGLM4 = (rf"{CONTRACTION}|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}{{1,3}}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK3 = [r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+",
             r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
             r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"]
# DeepSeek LLM and V2's letters (Latin, Greek, Cyrillic, Armenian, Georgian...), as listed
# in llama.cpp's llama-vocab.cpp
DEEPSEEK_LETTERS = (  # escaped: editors and tools normalise some of these letters (K, Ω)
    "A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1"
    "\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5"
    "\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a"
    "\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d"
    "\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3"
    "\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115"
    "\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f"
    "\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
    "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943")
DEEPSEEK_LLM = [r"[\r\n]", rf"\s?[{DEEPSEEK_LETTERS}]+", r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
                r"\s+$", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}+"]
DEEPSEEK_CODER = [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}"]
FALCON = [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"]
BAILING = (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
SEED_CODER = (rf"{CONTRACTION}|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}{{1}}"
              r"| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+")
NORDIC = r" ?[^(\s|.,!?…。，、।۔،)]+"

# Kimi K2's (tiktoken's) split as llama.cpp's custom kimi-k2 handler makes it: runs of Han
# characters (its ranges, not Unicode's Han script) apart, then words of any other letters
# (upper and lower case alike, marks apart) with a contraction, digits by three, the rest
HAN = ("\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002ebef\uf900-\ufaff"
       "\U0002f800-\U0002fa1f")
NOT_HAN_LETTER = rf"(?:(?![{HAN}])\p{{L}})"
KIMI_K2 = (rf"[{HAN}]+|[^\r\n\p{{L}}\p{{N}}]?{NOT_HAN_LETTER}+{CONTRACTION}?"
           r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Chameleon's: its sentinel and image tokens, tabs, newlines and space runs, digits and
# punctuation one by one, then GPT-2's
CHAMELEON = [r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )",
             r"\p{N}", r"[\p{P}!-/:-@\[-`{-~]", GPT2]

# llama.cpp reads \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm} and \p{Lo} all as \p{L} (unicode.cpp), so the
# expressions that name them split camelCase words no more than \p{L}+ does
def letters_as_llama_cpp(regex: str) -> str:
    for kind in ("Lu", "Ll", "Lt", "Lm", "Lo"):
        regex = regex.replace(rf"\p{{{kind}}}", r"\p{L}")
    return regex


# AFMoE's and Tiny Aya's digits (llama.cpp's custom splitter): a run of digits gives its first
# n mod 3 (else 3) digits together with the text before the run, then groups of three
GROUPED_DIGITS = r"[^\p{N}]*\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))"
NEWLINE_RUNS = r"[^\n]+|[\n]+"
MINICPM5 = (rf"{CONTRACTION}|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}+"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
JAIS2 = (rf"{CONTRACTION}|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|\p{{N}}{{1,3}}"
         r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)"
         r"|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}")
QWEN35 = (rf"{CONTRACTION}|[^\r\n\p{{L}}\p{{N}}]?[\p{{L}}\p{{M}}]+|\p{{N}}"
          r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
EXAONE_MOE = (rf"{CONTRACTION}|[^\r\n\p{{L}}\p{{N}}]?(?:\p{{L}}\p{{M}}*(?: \p{{L}}\p{{M}}*)*)+"
              r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+")
# GPT-4o's with marks counted as letters
MARKED_UPPER, MARKED_LOWER = r"((?=[\p{L}\p{M}])([^a-z]))", r"((?=[\p{L}\p{M}])([^A-Z]))"
GRANITE_MULTI = (rf"[^\r\n\p{{L}}\p{{N}}]?{MARKED_UPPER}*{MARKED_LOWER}+{CONTRACTION}?"
                 rf"|[^\r\n\p{{L}}\p{{N}}]?{MARKED_UPPER}+{MARKED_LOWER}*{CONTRACTION}?"
                 r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CASED = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         rf"{CONTRACTION}?|[^\r\n\p{{L}}\p{{N}}]?[\p{{Lu}}\p{{Lt}}\p{{Lm}}\p{{Lo}}\p{{M}}]+"
         rf"[\p{{Ll}}\p{{Lm}}\p{{Lo}}\p{{M}}]*{CONTRACTION}?")
TINY_AYA = [GROUPED_DIGITS, letters_as_llama_cpp(
    rf"{CASED}|\p{{N}}{{1,3}}| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")]
YOUTU = [r"[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
         letters_as_llama_cpp(
             rf"{CASED}|\p{{N}}| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")]
AFMOE = [GROUPED_DIGITS, "[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
         DEEPSEEK3[2]]
SPARK2_5 = DEEPSEEK3[:2] + [
    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+", r"\p{N}"]
UFAKZEKA = (r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)"
            r"|\s+")

DIGIT_THEN_GPT2 = ([r"\p{N}", GPT2], False)
LLAMA3_SPLIT = ([LLAMA3], True)

# tokenizer.ggml.pre (llama.cpp's names) -> (regular expressions applied in turn,
# ignore_merges: a whole piece that is a token is taken as it is)
PRE_TOKENIZERS = {
    "default": ([r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"], False),
    "gpt-2": ([GPT2], False), "mpt": ([GPT2], False), "olmo": ([GPT2], False),
    "smollm": DIGIT_THEN_GPT2, "starcoder": DIGIT_THEN_GPT2, "refact": DIGIT_THEN_GPT2,
    "command-r": DIGIT_THEN_GPT2, "codeshell": DIGIT_THEN_GPT2, "exaone": DIGIT_THEN_GPT2,
    "llama-bpe": LLAMA3_SPLIT, "llama3": LLAMA3_SPLIT, "llama-v3": LLAMA3_SPLIT,
    "qwen2": ([QWEN2], False), "stablelm2": ([QWEN2], False),
    "deepseek-r1-qwen": ([QWEN2], False), "hunyuan": ([QWEN2], False),
    "megrez": ([QWEN2], False),
    "dbrx": ([LLAMA3], False), "smaug-bpe": ([LLAMA3], False),
    "tekken": ([TEKKEN], True), "gpt-4o": ([GPT4O], False), "llama4": ([GPT4O], False),
    "chatglm-bpe": ([CHATGLM4], False), "deepseek-v3": (DEEPSEEK3, False),
    "deepseek-coder": (DEEPSEEK_CODER, False), "deepseek-llm": (DEEPSEEK_LLM, False),
    "falcon": (FALCON, False),
    "jais": ([GPT2], False), "minerva-7b": DIGIT_THEN_GPT2,
    "poro-chat": ([NORDIC], False), "bloom": ([NORDIC], False),
    "gpt3-finnish": ([NORDIC], False), "viking": ([NORDIC, r"\p{N}"], False),
    # other names llama.cpp gives the same splitting (llama-vocab.cpp)
    **{name: LLAMA3_SPLIT for name in ("falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2")},
    **{name: ([GPT2], False) for name in ("phi-2", "jina-es", "jina-de", "gigachat",
                                          "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
                                          "exaone4")},
    "glm4": ([CHATGLM4], False), "hunyuan-dense": (DEEPSEEK3, False),
    "trillion": ([GPT2], False), "granite-docling": ([GPT2], False),
    "minimax-m2": ([GPT4O], False), "grok-2": ([QWEN2], False),
    **{name: ([BAILING], False) for name in ("bailingmoe", "bailingmoe2", "llada-moe")},
    "seed-coder": ([SEED_CODER], False), "kimi-k2": ([KIMI_K2], False),
    "chameleon": (CHAMELEON, False),
    "superbpe": ([r"\p{N}+", r"(?=(\d{3})+(?!\d))"], False),
    "minicpm5": ([r"\p{N}{1,3}", MINICPM5], True), "youtu": (YOUTU, True),
    "jais-2": ([JAIS2], False), "qwen35": ([QWEN35], False),
    "exaone-moe": ([EXAONE_MOE], False), "granite-embed-multi-97m": ([GRANITE_MULTI], True),
    "tiny_aya": (TINY_AYA, False), "cohere2moe": (TINY_AYA, False), "afmoe": (AFMOE, False),
    "laguna": ([NEWLINE_RUNS, QWEN2], False), "spark2_5": (SPARK2_5, False),
    "ufakzeka": ([UFAKZEKA], False), "mellum2": DIGIT_THEN_GPT2, "jina-v5-nano": LLAMA3_SPLIT,
    **{name: ([QWEN2], False) for name in ("solar-open", "kormo", "f2llmv2")},
    **{name: (DEEPSEEK3, False) for name in ("joyai-llm", "hy_v4")},
    **{name: ([GPT4O], False) for name in ("kanana2", "talkie")},
    "glm5": ([CHATGLM4], False),
    # these add a separator between the two texts of a reranking pair; alone, GPT-2's split
    **{name: ([GPT2], False) for name in ("jina-v1-en", "jina-v2-code", "roberta-bpe",
                                          "modern-bert")},
}


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte, inverted."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


class BPETokenizer:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self._check()
        ids = {text: i for i, text in enumerate(vocab.tokens)}
        merges = [tuple(m.split(" ", 1)) for m in vocab.merges]
        self._plain = self._build(ids, merges, with_control=False)
        self._special = self._build(ids, merges, with_control=True)
        self.token_bytes = self._token_bytes()

    def _check(self) -> None:
        if self.vocab.pre not in PRE_TOKENIZERS:
            raise ValueError(f"Unsupported pre-tokenizer {self.vocab.pre!r}; supported: "
                             f"{', '.join(PRE_TOKENIZERS)}.")

    def _model(self, ids, merges) -> models.BPE:
        return models.BPE(vocab=ids, merges=merges,
                          ignore_merges=PRE_TOKENIZERS[self.vocab.pre][1])

    def _prepare(self, tokenizer: Tokenizer) -> None:
        """The steps before the merges: here the regular expressions, then the bytes as
        GPT-2's printable characters."""
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r), behavior="isolated")
             for r in PRE_TOKENIZERS[self.vocab.pre][0]]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])

    def _token_bytes(self) -> list[bytes]:
        decode = byte_decoder()
        return [text.encode() if kind in (TokenType.CONTROL, TokenType.USER_DEFINED)
                else bytes(decode.get(ch, 0x3F) for ch in text)
                for text, kind in zip(self.vocab.tokens, self.vocab.types)]

    def _build(self, ids, merges, with_control: bool) -> Tokenizer:
        tokenizer = Tokenizer(self._model(ids, merges))
        self._prepare(tokenizer)
        kinds = (TokenType.USER_DEFINED, TokenType.CONTROL) if with_control else \
            (TokenType.USER_DEFINED,)
        tokenizer.add_special_tokens([
            AddedToken(self.vocab.tokens[i], normalized=False, special=True)
            for i in self.vocab.ids_of_type(*kinds)])
        return tokenizer

    def encode(self, text: str, parse_special: bool = True) -> list[int]:
        tokenizer = self._special if parse_special else self._plain
        return tokenizer.encode(text, add_special_tokens=False).ids
