"""Output held to a grammar: any JSON object ("json"), a JSON Schema, or a GBNF grammar (or
llguidance's own Lark, when it starts with %llguidance),
enforced token by token with llguidance (the grammar engine llama.cpp integrates).

compile_grammar() turns a request's format or grammar into llguidance's grammar text, with a
full-sentence error for a bad one. A Constraint follows one sequence: before each sampling it
gives the mask of the tokens the grammar allows next; after it, it consumes the chosen token
and starts computing the next mask on a helper thread (llguidance releases the GIL), so the
mask is ready when the next logits are, instead of stalling the batch loop.
"""

from __future__ import annotations

import json
import weakref
from typing import Any
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..tokenizer import Tokenizer, TokenType

ANY_JSON_OBJECT = {"type": "object"}       # format "json", as Ollama's json grammar
LARK = "%llguidance"          # a grammar that starts so is llguidance's Lark, not GBNF
# whitespace between JSON tokens as llama.cpp's schema grammars allow it: none, a space, or a
# newline and some indentation; never unbounded (a small model could pad for ever)
JSON_OPTIONS: Any = {"whitespace_flexible": True, "whitespace_pattern": r"(?: |\n[ \t]{0,20})?"}
_masks = ThreadPoolExecutor(max_workers=2, thread_name_prefix="grammar")
_vocabularies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class GrammarError(ValueError):
    """The format or grammar of a request cannot be compiled."""


def compile_grammar(tokenizer: Tokenizer, vocab_size: int, format=None,
                    grammar: str = "") -> str | None:
    """llguidance grammar text for a request's format ("json", a JSON Schema object, or its
    JSON text) or GBNF grammar; None when neither constrains the output."""
    schema = None if grammar else schema_of(format)
    if not grammar and schema is None:
        return None                       # llguidance is loaded only for constrained output
    import llguidance

    if grammar:
        if format not in (None, "", "null"):
            raise GrammarError("A request takes a format or a grammar, not both.")
        from llguidance.gbnf_to_lark import gbnf_to_lark

        try:
            lark = grammar if grammar.startswith(LARK) else gbnf_to_lark(grammar)
            text = llguidance.LLMatcher.grammar_from_lark(lark)
        except Exception as error:               # noqa: BLE001 - its parser's message
            raise GrammarError(f"The grammar is not valid GBNF: {str(error).rstrip('.')}.") \
                from None
    else:
        text = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema),
                                                             overrides=JSON_OPTIONS)
    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
        text, vocabulary(tokenizer, vocab_size))
    if failed:
        raise GrammarError(f"The {'grammar' if grammar else 'JSON schema'} cannot be "
                           f"enforced: {'; '.join(messages) or 'it is invalid'}.")
    return text


def schema_of(format) -> dict | None:
    """The JSON Schema a format asks for: "json" any object; a schema, as an object or its
    JSON text; nothing for None, "" and "null"."""
    if format in (None, "", "null"):
        return None
    if format == "json":
        return ANY_JSON_OBJECT
    if isinstance(format, str):
        try:
            format = json.loads(format)
        except json.JSONDecodeError:
            raise GrammarError(f'A format is "json" or a JSON Schema object, not {format!r}.') \
                from None
    if not isinstance(format, dict):
        raise GrammarError(f'A format is "json" or a JSON Schema object, not {format!r}.')
    return closed(format)


SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")


def closed(schema):
    """schema with every object that lists its properties closed to others unless it says
    otherwise (additionalProperties), as llama.cpp's schema grammars (and so Ollama's) read
    them: a JSON Schema would allow any other key, which clients that parse the reply into
    a type (LangChain, LiteLLM) do not expect."""
    if not isinstance(schema, dict):
        return schema
    found = dict(schema)
    if "properties" in found and "additionalProperties" not in found:
        found["additionalProperties"] = False
    for key in SUBSCHEMAS:
        if key in found:
            found[key] = closed(found[key])
    for key in SCHEMA_LISTS:
        if isinstance(found.get(key), list):
            found[key] = [closed(item) for item in found[key]]
    for key in SCHEMA_MAPS:
        if isinstance(found.get(key), dict):
            found[key] = {name: closed(item) for name, item in found[key].items()}
    return found


def vocabulary(tokenizer: Tokenizer, vocab_size: int):
    """llguidance's view of the vocabulary (built once per tokenizer: about a second for a
    large one): each token's bytes, control tokens marked so text never matches them."""
    import llguidance

    key = _vocabularies.get(tokenizer)
    if key is None or key[0] != vocab_size:
        key = (vocab_size, llguidance.LLTokenizer(
            llguidance.TokenizerWrapper(_Words(tokenizer, vocab_size)),
            n_vocab=vocab_size, eos_token=sorted(tokenizer.vocab.eog)))
        _vocabularies[tokenizer] = key
    return key[1]


class _Words:
    """What llguidance.TokenizerWrapper reads of a tokenizer."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int):
        vocab = tokenizer.vocab
        special = {i for i, kind in enumerate(vocab.types) if kind == TokenType.CONTROL} | \
            {i for i, kind in enumerate(vocab.types) if kind == TokenType.USER_DEFINED
             and vocab.tokens[i].startswith("<") and vocab.tokens[i].endswith(">")}
        self.tokens = [b"\xff" + piece if i in special else piece
                       for i, piece in enumerate(tokenizer.token_bytes)]
        self.tokens += [b""] * (vocab_size - len(self.tokens))
        self.special_token_ids = sorted(special)
        self.eos_token_id = vocab.eos
        self.bos_token_id = vocab.bos
        self._tokenizer = tokenizer

    def __call__(self, text):
        if not isinstance(text, str):
            raise TypeError("text, not bytes")   # tells the wrapper to pass str
        return self._tokenizer.encode(text, add_special=False, parse_special=False)


class Constraint:
    """One sequence's grammar state: the mask of allowed tokens, then the token taken."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int, grammar: str):
        import llguidance

        self.matcher = llguidance.LLMatcher(vocabulary(tokenizer, vocab_size), grammar,
                                            log_level=0)
        self.size = vocab_size
        self._bits = np.zeros((vocab_size + 31) // 32, dtype=np.int32)
        self._next: Future | None = None
        self._prepare()

    def _prepare(self) -> None:
        self._next = _masks.submit(self._compute)

    def _compute(self) -> np.ndarray:
        self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        return np.unpackbits(self._bits.view(np.uint8), bitorder="little")[:self.size] \
            .astype(bool)

    def allowed(self) -> np.ndarray:
        """bool (vocab,): the tokens the grammar allows next."""
        assert self._next is not None, "allowed() before the grammar was asked for a mask"
        return self._next.result()

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """logits with every disallowed token at -inf."""
        return np.where(self.allowed(), logits, -np.inf).astype(np.float32)

    def accept(self, token: int) -> bool:
        """Take the sampled token; False when the grammar is complete (nothing may follow)."""
        if not self.matcher.consume_token(token):
            raise GrammarError(f"The grammar refused token {token}: "
                               f"{self.matcher.get_error() or 'not allowed'}.")
        if self.matcher.is_stopped():
            return False
        self._prepare()
        return True


class AfterThinking:
    """A constraint that leaves the reply's thinking free and holds its answer to the
    grammar (Ollama's format with think): unconstrained from the think tag's opening to its
    close, constrained after. When the prompt has not opened thinking, the first token may
    open it (when the open tag is one token) or start the answer, which the grammar then
    holds from the start. Used like Constraint."""

    def __init__(self, inner: Constraint, tokenizer: Tokenizer, tags: tuple[str, str],
                 opened: bool = False):
        self.inner, self.tokenizer, (self.open, self.close) = inner, tokenizer, tags
        ids = tokenizer.encode(self.open, add_special=False, parse_special=True)
        self.open_id = ids[0] if len(ids) == 1 else None
        self.thinking, self.text = opened, ""
        self.first = not opened and self.open_id is not None   # the open tag may come next

    def apply(self, logits: np.ndarray) -> np.ndarray:
        if self.thinking:
            return logits
        masked = self.inner.apply(logits)
        if self.first:                                  # the answer, or the open tag
            masked[self.open_id] = logits[self.open_id]
        return masked

    def accept(self, token: int) -> bool:
        if self.first:
            self.first = False
            if token == self.open_id:
                self.thinking, self.text = True, self.open
                return True
        if not self.thinking:
            return self.inner.accept(token)
        self.text += self.tokenizer.piece(token).decode("utf-8", errors="replace")
        if self.close in self.text:                     # the answer starts: the grammar
            self.thinking = False                       # holds it from here
        else:
            self.text = self.text[-len(self.close):]    # enough to find the close tag
        return True
