"""The tokenizer of a checkpoint as llama.cpp's converter writes it into GGUF.

tokenizer.model (SentencePiece, read with the sentencepiece library) becomes
tokenizer.ggml.model "llama" with each piece's score and kind. Otherwise tokenizer.json
with a BPE model becomes tokenizer.ggml.model "gpt2"; its pre-tokenizer's
regular expressions name tokenizer.ggml.pre (the names runner/tokenizer/bpe.py knows).
A BPE over SentencePiece-style text (spaces as U+2581, byte fallback), as Gemma 4's is,
becomes tokenizer.ggml.model "gemma4", as llama.cpp names it; a Unigram model
(XLM-RoBERTa's) becomes "t5" with its scores and precompiled normalization map.
Added tokens marked special are CONTROL, the other added tokens USER_DEFINED; ids the
config's vocabulary size reserves beyond the tokenizer's are padding, UNUSED.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import gguf

from ..tokenizer.bpe import GPT2, PRE_TOKENIZERS
from ..tokenizer.spm import SPACE
from ..tokenizer.vocab import TokenType
from .checkpoint import Checkpoint, CheckpointError, read_json

BYTE_TOKEN = re.compile(r"<0x[0-9A-F]{2}>")
# the name written when several share the same expressions (llama.cpp's usual choice)
PREFERRED = ["llama-bpe", "qwen2", "gpt-2", "smollm", "default"]


def pre_tokenizer_name(spec: dict | None, ignore_merges: bool) -> str:
    regexes = _split_patterns(spec)
    names = PREFERRED + [n for n in PRE_TOKENIZERS if n not in PREFERRED]
    for name in names:
        if PRE_TOKENIZERS[name] == (regexes, ignore_merges):
            return name
    raise CheckpointError(f"The tokenizer's pre-tokenizer (splitting by {regexes}) is not one "
                          f"this runner knows; known: {', '.join(PRE_TOKENIZERS)}.")


def _split_patterns(spec: dict | None) -> list[str]:
    if spec is None:
        return []
    if spec["type"] == "Sequence":
        return [r for part in spec["pretokenizers"] for r in _split_patterns(part)]
    if spec["type"] == "Split":
        return [spec["pattern"].get("Regex") or spec["pattern"]["String"]]
    if spec["type"] == "ByteLevel":
        return [GPT2] if spec.get("use_regex", True) else []
    if spec["type"] == "Digits":
        return [r"\p{N}"]
    raise CheckpointError(f"The tokenizer's pre-tokenizer {spec['type']} is not supported.")


def write_tokenizer(writer: gguf.GGUFWriter, checkpoint: Checkpoint, vocab_size: int,
                    space_prefix: bool = True) -> None:
    if (checkpoint.dir / "vocab.txt").exists() and \
            not (checkpoint.dir / "tokenizer.model").exists():
        _write_wordpiece(writer, checkpoint, vocab_size)
    elif (checkpoint.dir / "tokenizer.model").exists():
        _write_sentencepiece(writer, checkpoint, vocab_size, space_prefix)
    else:
        _write_bpe(writer, checkpoint, vocab_size)


def _write_sentencepiece(writer, checkpoint: Checkpoint, vocab_size: int,
                         space_prefix: bool) -> None:
    from sentencepiece import SentencePieceProcessor

    sp = SentencePieceProcessor()
    sp.LoadFromFile(str(checkpoint.dir / "tokenizer.model"))
    size = max(vocab_size, sp.vocab_size())
    tokens = [f"[PAD{i}]" for i in range(size)]
    scores, types = [-10000.0] * size, [TokenType.UNUSED] * size
    kinds = ((sp.IsUnknown, TokenType.UNKNOWN), (sp.IsControl, TokenType.CONTROL),
             (sp.IsUnused, TokenType.UNUSED), (sp.IsByte, TokenType.BYTE))
    for i in range(sp.vocab_size()):
        tokens[i], scores[i] = sp.IdToPiece(i), sp.GetScore(i)
        types[i] = next((kind for test, kind in kinds if test(i)), TokenType.NORMAL)
    ids = {text: i for i, text in enumerate(tokens)}
    for key, added in checkpoint.tokenizer_config.get("added_tokens_decoder", {}).items():
        i = int(key)
        if 0 <= i < size:
            tokens[i] = added["content"]
            types[i] = TokenType.CONTROL if added.get("special") else TokenType.USER_DEFINED
            ids[added["content"]] = i
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types([int(t) for t in types])
    writer.add_add_space_prefix(space_prefix)
    if sp.unk_id() >= 0:
        writer.add_unk_token_id(sp.unk_id())
    _special_ids(writer, checkpoint, ids, default_bos=True)


def _write_wordpiece(writer, checkpoint: Checkpoint, vocab_size: int) -> None:
    """vocab.txt, one piece a line, stored with llama.cpp's phantom space: a word-initial
    piece x as "\u2581x", a continuation ##x as "x", bracketed special tokens as they are."""
    pieces = (checkpoint.dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    config = checkpoint.tokenizer_config
    named = {key: (value.get("content") if isinstance(value, dict) else value)
             for key, value in config.items() if key.endswith("_token")}
    special = {text for text in named.values() if text}
    size = max(vocab_size, len(pieces))
    tokens, types = [f"[PAD{i}]" for i in range(size)], [TokenType.UNUSED] * size
    for i, piece in enumerate(pieces):
        bracketed = piece.startswith("[") and piece.endswith("]")
        tokens[i] = piece if bracketed else piece[2:] if piece.startswith("##") \
            else "\u2581" + piece
        types[i] = TokenType.CONTROL if piece in special else \
            TokenType.UNKNOWN if piece == named.get("unk_token") else TokenType.NORMAL
    ids = {piece: i for i, piece in enumerate(pieces)}
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([int(t) for t in types])
    for key, add in (("cls_token", writer.add_bos_token_id), ("sep_token",
                     writer.add_eos_token_id), ("unk_token", writer.add_unk_token_id),
                     ("pad_token", writer.add_pad_token_id), ("sep_token",
                     writer.add_sep_token_id), ("mask_token", writer.add_mask_token_id)):
        text = named.get(key)
        if text is not None and text in ids:
            add(ids[text])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(True)


def _write_bpe(writer, checkpoint: Checkpoint, vocab_size: int) -> None:
    path = checkpoint.dir / "tokenizer.json"
    if not path.exists():
        raise CheckpointError("The checkpoint has neither tokenizer.model nor "
                              "tokenizer.json.")
    spec = read_json(path)
    model = spec["model"]
    if model["type"] == "Unigram":
        return _write_unigram(writer, checkpoint, vocab_size, spec)
    if model["type"] != "BPE":
        raise CheckpointError(f"The tokenizer is {model['type']}; this converter reads BPE "
                              "and Unigram.")
    sentence = _sentencepiece_style(spec)
    ids = dict(model["vocab"])
    special = set()
    for added in spec.get("added_tokens", []):
        ids[added["content"]] = added["id"]
        if added.get("special"):
            special.add(added["content"])
    user = {a["content"] for a in spec.get("added_tokens", [])} - special
    size = _token_count(ids, vocab_size)
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [TokenType.UNUSED] * size
    for text, i in ids.items():
        tokens[i] = text
        types[i] = TokenType.CONTROL if text in special else \
            TokenType.USER_DEFINED if text in user else \
            TokenType.BYTE if sentence and BYTE_TOKEN.fullmatch(text) else TokenType.NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    if sentence:
        writer.add_tokenizer_model("gemma4")
        writer.add_tokenizer_pre("gemma4")
        writer.add_add_space_prefix(False)
    else:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre_tokenizer_name(spec.get("pre_tokenizer"),
                                                    bool(model.get("ignore_merges", False))))
    writer.add_token_list(tokens)
    writer.add_token_types([int(t) for t in types])
    writer.add_token_merges(merges)
    checkpoint.tokenizer_post_processor = spec.get("post_processor")
    _special_ids(writer, checkpoint, ids)


def _token_count(ids: dict, vocab_size: int) -> int:
    """The tokens to write: vocab_size, or more where the tokenizer has more; an id beyond
    both (a gap the list would fill with padding) is refused, as a lie about the size."""
    count = max(vocab_size, len(ids))
    for text, i in ids.items():
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < count:
            raise CheckpointError(f"tokenizer.json gives the token {text!r} the id {i!r}, "
                                  f"not one of the {count} ids of its vocabulary.")
    return count


def _write_unigram(writer, checkpoint: Checkpoint, vocab_size: int, spec: dict) -> None:
    """A tokenizer.json Unigram model (XLM-RoBERTa's) as llama.cpp writes it: pieces and
    scores, the normalizer's precompiled map, a space before the text where the
    pre-tokenizer adds one, space runs merged where the normalizer merges them."""
    model = spec["model"]
    pieces = [(str(piece), float(score)) for piece, score in model["vocab"]]
    special = {a["content"] for a in spec.get("added_tokens", []) if a.get("special")}
    user = {a["content"] for a in spec.get("added_tokens", [])} - special
    size = max(vocab_size, len(pieces))
    tokens, scores = [f"[PAD{i}]" for i in range(size)], [-10000.0] * size
    types = [TokenType.UNUSED] * size
    for i, (piece, score) in enumerate(pieces):
        tokens[i], scores[i] = piece, score
        types[i] = TokenType.UNKNOWN if i == model.get("unk_id") else \
            TokenType.CONTROL if piece in special else \
            TokenType.USER_DEFINED if piece in user else TokenType.NORMAL
    steps = _normalizer_steps(spec)
    maps = [step["precompiled_charsmap"] for step in steps if step.get("type") == "Precompiled"]
    pre = spec.get("pre_tokenizer") or {}
    metaspace = [part for part in pre.get("pretokenizers", [pre])
                 if part.get("type") == "Metaspace"]
    writer.add_tokenizer_model("t5")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types([int(t) for t in types])
    writer.add_add_space_prefix(bool(metaspace) and metaspace[0].get(
        "prepend_scheme", "always" if metaspace[0].get("add_prefix_space", True) else
        "never") != "never")
    writer.add_remove_extra_whitespaces(any(
        step.get("type") == "Replace" and step.get("content") == " " and
        step.get("pattern", {}).get("Regex") == " {2,}" for step in steps))
    if maps and maps[0]:
        writer.add_precompiled_charsmap(base64.b64decode(maps[0]))
    if model.get("unk_id") is not None:
        writer.add_unk_token_id(int(model["unk_id"]))
    processor = spec.get("post_processor") or {}
    checkpoint.tokenizer_post_processor = processor
    _special_ids(writer, checkpoint, {text: i for i, text in enumerate(tokens)},
                 default_bos=processor.get("type") in ("RobertaProcessing", "BertProcessing"))
    single = processor.get("single") or [{}]
    writer.add_add_eos_token(processor.get("type") in ("RobertaProcessing", "BertProcessing")
                             or "SpecialToken" in single[-1])


def _normalizer_steps(spec: dict) -> list[dict]:
    normalizer = spec.get("normalizer") or {}
    return normalizer.get("normalizers", [normalizer]) if normalizer.get("type") == \
        "Sequence" else [normalizer]


def _sentencepiece_style(spec: dict) -> bool:
    """A BPE over SentencePiece-style text: spaces replaced by U+2581 (no space before the
    text) and bytes as <0xNN> fallback tokens, as Gemma 4's tokenizer.json is. llama.cpp
    names this tokenizer "gemma4" and splits such text only at newlines."""
    if not spec["model"].get("byte_fallback"):
        return False
    steps = _normalizer_steps(spec)
    if any(step.get("type") == "Prepend" for step in steps):
        raise CheckpointError("This tokenizer.json puts a space before the text (a "
                              "SentencePiece-style BPE like Llama 2's); the converter reads "
                              "that kind from tokenizer.model only.")
    return any(step.get("type") == "Replace" and step.get("pattern", {}).get("String") == " "
               and step.get("content") == SPACE for step in steps)


def _special_ids(writer: gguf.GGUFWriter, checkpoint: Checkpoint, ids: dict,
                 default_bos: bool = False) -> None:
    config, tokenizer = checkpoint.config, checkpoint.tokenizer_config

    def token_id(key: str):
        value = tokenizer.get(f"{key}_token")
        text = value.get("content") if isinstance(value, dict) else value
        return ids.get(text) if text is not None else config.get(f"{key}_token_id")

    bos = token_id("bos")
    eos = checkpoint.eos_ids() or ([token_id("eos")] if token_id("eos") is not None else [])
    if bos is not None:
        writer.add_bos_token_id(bos)
    if eos:
        writer.add_eos_token_id(eos[0])
        if len(eos) > 1:
            writer.add_eot_token_id(eos[1])
    pad = token_id("pad")
    if pad is not None:
        writer.add_pad_token_id(pad)
    add_bos = tokenizer.get("add_bos_token", True if default_bos else None)
    if add_bos is None:                  # fast tokenizers say it in their post-processor
        single = (checkpoint.tokenizer_post_processor or {}).get("single") or [{}]
        add_bos = "SpecialToken" in single[0]
    writer.add_add_bos_token(bool(add_bos))
    template = chat_template(checkpoint.dir, tokenizer)
    if template is not None:
        writer.add_chat_template(template)


def chat_template(directory, tokenizer: dict) -> str | None:
    """The checkpoint's chat template: chat_template.jinja (where transformers saves it
    now), chat_template.json, or tokenizer_config.json's."""
    directory = Path(directory)
    if (directory / "chat_template.jinja").is_file():
        return (directory / "chat_template.jinja").read_text()
    if (directory / "chat_template.json").is_file():
        found = read_json(directory / "chat_template.json").get("chat_template")
        if isinstance(found, str):
            return found
    template = tokenizer.get("chat_template")
    return template if isinstance(template, str) else None
