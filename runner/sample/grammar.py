"""Output held to a grammar: any JSON object ("json"), a JSON Schema, or a GBNF grammar (or
llguidance's own Lark, when it starts with %llguidance),
enforced token by token with llguidance (the grammar engine llama.cpp integrates).

compile_grammar() turns a request's format or grammar into llguidance's grammar text, with a
full-sentence error for a bad one. A Constraint follows one sequence: before each sampling it
gives the mask of the tokens the grammar allows next; after it, it consumes the chosen token
and starts computing the next mask on a helper thread (llguidance releases the GIL), so the
mask is ready when the next logits are, instead of stalling the batch loop.

A grammar comes from a stranger, so what it may cost is bounded (docs/serve.md): its text's
length and a schema's nesting, a GBNF grammar's rules (llguidance's converter is quadratic in
them), llguidance's own limits on compiling and on each token's mask (LIMITS: the first mask
is computed while compiling, so a grammar too complex for it is refused before generating),
and the stack it compiles on (llguidance's compiler recurses once per link of a chain of
rules or $refs: a few thousand crash a thread of 8 MiB).
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any, Callable, TypeVar
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..tokenizer import Tokenizer, TokenType

ANY_JSON_OBJECT = {"type": "object"}       # format "json", as Ollama's json grammar
LARK = "%llguidance"          # a grammar that starts so is llguidance's Lark, not GBNF
# whitespace between JSON tokens as llama.cpp's schema grammars allow it: none, a space, or a
# newline and some indentation; never unbounded (a small model could pad for ever)
JSON_OPTIONS: Any = {"whitespace_flexible": True, "whitespace_pattern": r"(?: |\n[ \t]{0,20})?"}
MAX_TEXT = 128 << 10          # characters of a schema's JSON or of a grammar
MAX_DEPTH = 128               # a schema's nesting (llguidance's JSON reader's own limit)
MAX_GBNF_RULES = 1000         # about 0.7 s of llguidance's GBNF converter, at worst
COMPILE_STACK = 256 << 20     # bytes: a chain as long as MAX_TEXT allows needs about 50 MiB
# llguidance's limits, its defaults made explicit (about 20 ms to compile the lexer, 15 ms
# of lexer and 3 ms of parser work a token) but for the lexer's states (1-2 kB each),
# fewer; its errors without the grammar and parser state they would otherwise carry
LIMITS: dict[str, Any] = {"initial_lexer_fuel": 1_000_000, "step_lexer_fuel": 200_000,
                          "step_max_items": 50_000, "max_items_in_row": 2000,
                          "max_lexer_states": 50_000, "max_grammar_size": 500_000,
                          "verbose_errors": False}
_masks = ThreadPoolExecutor(max_workers=2, thread_name_prefix="grammar")
_vocabularies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_stack_size = threading.Lock()
T = TypeVar("T")


class GrammarError(ValueError):
    """The format or grammar of a request cannot be compiled."""


def limits():
    import llguidance

    return llguidance.LLParserLimits(**LIMITS)


def on_deep_stack(work: Callable[[], T]) -> T:
    """work() on a thread of its own with COMPILE_STACK bytes of stack (only what it touches
    is memory), for llguidance's recursive compiler."""
    found: dict[str, Any] = {}

    def run() -> None:
        try:
            found["value"] = work()
        except BaseException as error:          # noqa: BLE001 - raised again below
            found["error"] = error

    with _stack_size:
        previous = threading.stack_size(COMPILE_STACK)
        try:
            thread = threading.Thread(target=run, name="grammar-compile")
            thread.start()
        finally:
            threading.stack_size(previous)
    thread.join()
    if "error" in found:
        raise found["error"]
    return found["value"]


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

        _check_length("grammar", grammar)
        lark = grammar.startswith(LARK)
        rules = 0 if lark else grammar.count("::=")
        if rules > MAX_GBNF_RULES:
            raise GrammarError(f"The GBNF grammar has {rules} rules; at most "
                               f"{MAX_GBNF_RULES} are enforced.")
        try:
            text = llguidance.LLMatcher.grammar_from_lark(grammar if lark else
                                                          gbnf_to_lark(grammar))
        except Exception as error:               # noqa: BLE001 - its parser's message
            raise GrammarError(f"The grammar is not valid GBNF: {str(error).rstrip('.')}.") \
                from None
    else:
        encoded = json.dumps(schema)
        _check_length("JSON schema", encoded)
        text = llguidance.LLMatcher.grammar_from_json_schema(encoded, overrides=JSON_OPTIONS)
    words = vocabulary(tokenizer, vocab_size)
    failed, messages = on_deep_stack(lambda: llguidance.LLMatcher
                                     .validate_grammar_with_warnings(text, words,
                                                                     limits=limits()))
    if failed:
        raise GrammarError(f"The {'grammar' if grammar else 'JSON schema'} cannot be "
                           f"enforced: {_sentence('; '.join(messages)) or 'it is invalid'}.")
    return text


def _check_length(what: str, text: str) -> None:
    if len(text) > MAX_TEXT:
        raise GrammarError(f"The {what} is {len(text)} characters long; at most {MAX_TEXT} "
                           "are enforced.")


def _sentence(message: str) -> str:
    """llguidance's message as a clause: its first line, without a final period."""
    return message.strip().split("\n", 1)[0].rstrip(".")


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
    depth = nesting(format)
    if depth > MAX_DEPTH:
        raise GrammarError(f"The JSON schema is nested {depth} levels deep; at most "
                           f"{MAX_DEPTH} are enforced.")
    return closed(format)


def nesting(value) -> int:
    """How many objects and lists deep value is (counted without recursing)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            pending += [(child, depth + 1)
                        for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


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
        """The grammar's matcher, built and asked for its first mask on a deep stack
        (GrammarError if either fails: a grammar too complex for llguidance's limits)."""
        import llguidance

        words = vocabulary(tokenizer, vocab_size)
        self.size = vocab_size
        self._bits = np.zeros((vocab_size + 31) // 32, dtype=np.int32)

        def start():
            self.matcher = llguidance.LLMatcher(words, grammar, log_level=0, limits=limits())
            return self._compute()

        first = on_deep_stack(start)
        self._next: Future | None = Future()
        self._next.set_result(first)

    def _prepare(self) -> None:
        self._next = _masks.submit(self._compute)

    def _compute(self) -> np.ndarray:
        self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        if self.matcher.is_error():
            raise GrammarError(f"The grammar cannot be enforced: "
                               f"{_sentence(self.matcher.get_error())}.")
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
                               f"{_sentence(self.matcher.get_error()) or 'not allowed'}.")
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
