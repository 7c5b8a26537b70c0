"""The Python API.

    import runner
    model = runner.load("smollm2:135m")            # a pulled name or a GGUF path
    for piece in model.generate("Why is the sky blue?", temperature=0):
        print(piece, end="")
    model.chat([{"role": "user", "content": "Hi"}], stream=False)

Requests go through the same batch loop as the runner subprocess's: with parallel=N,
N generations from different threads advance together.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, fields

import pyggml

from .chat import render, template_for
from .engine import Engine, Request
from .engine.pooling import pooling_of
from .executor import Executor
from .generate import GenerateOptions
from .kvcache import CausalCache
from .loader import load_model
from .sample import SamplingOptions


@dataclass
class LoadOptions:
    num_ctx: int = 4096          # tokens one sequence holds
    parallel: int = 1            # sequences sharing the KV cache (its cells: num_ctx * parallel)
    batch_size: int = 512
    threads: int | None = None
    flash_attn: bool = False
    kv_cache_type: str = "f16"
    repack: bool = True          # repacked CPU weight layouts, as llama.cpp by default
    multiuser_cache: bool = False   # fork the best cached prefix into the LRU slot
    overlap: bool = True         # build the next batch's graph while one computes

    def __post_init__(self):
        for name in ("num_ctx", "batch_size", "parallel"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}.")


def split_options(options: dict, ignored=frozenset()) -> tuple[SamplingOptions,
                                                                 GenerateOptions]:
    """Sampling and generation options from one dict of Ollama option names; a name neither
    knows (nor listed in ignored) is an error that lists the known ones."""
    options = {k: v for k, v in options.items() if v is not None}     # Go's nil slices
    sampling_names = {f.name for f in fields(SamplingOptions)}
    generate_names = {f.name for f in fields(GenerateOptions)}
    unknown = set(options) - sampling_names - generate_names - set(ignored)
    if unknown:
        raise ValueError(f"Unknown option(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(sorted(sampling_names | generate_names))}.")
    return (SamplingOptions(**{k: v for k, v in options.items() if k in sampling_names}),
            GenerateOptions(**{k: v for k, v in options.items() if k in generate_names}))


@dataclass
class Result:
    """How the last finished generation ended (the text itself was streamed)."""
    done_reason: str               # "stop" | "length" | "closed"
    prompt_eval_count: int         # tokens evaluated (a reused prefix is not)
    eval_count: int                # tokens generated
    prompt_eval_duration: int      # nanoseconds, from the request (tokenizing included)
    eval_duration: int


class Model:
    """A loaded model and its batch loop (parallel slots, prompt cache)."""

    def __init__(self, name_or_path, options: LoadOptions, progress=None):
        self.options = options
        self.backend = pyggml.cpu_backend(options.threads)
        self.loaded = load_model(name_or_path, self.backend, progress, options.repack)
        self.tokenizer = self.loaded.tokenizer
        context = min(options.num_ctx, getattr(self.loaded.model.config, "context",
                                               options.num_ctx))
        self.kv = CausalCache(self.loaded.model.cache_layers(), context * options.parallel,
                              self.backend,
                              options.kv_cache_type, options.flash_attn)
        self.scheduler = pyggml.Scheduler([self.backend])
        self.executor = Executor(self.loaded.model, self.kv, self.scheduler)
        self.engine = Engine(self.executor, self.tokenizer, options.parallel,
                             options.batch_size, options.multiuser_cache, options.overlap,
                             pooling_of(self.loaded.metadata))
        self.engine.reserve()
        self.engine.start()
        self.template = template_for(self.loaded.metadata)
        self.last: Result | None = None

    @property
    def architecture(self) -> str:
        return self.loaded.architecture

    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True):
        return self.tokenizer.encode(text, add_special, parse_special)

    def detokenize(self, tokens) -> str:
        return self.tokenizer.decode(tokens)

    def apply_template(self, messages: list[dict]) -> str:
        if self.template is None:
            raise ValueError("This model has no chat template; generate with raw prompts.")
        vocab = self.tokenizer.vocab
        name = (lambda i: vocab.tokens[i] if i is not None else "")
        return render(self.template, messages, bos=name(vocab.bos), eos=name(vocab.eos))

    def generate(self, prompt: str, stream: bool = True, **options):
        """Continue prompt (tokenized with BOS as the model asks). Streams text pieces, or
        returns the whole text with stream=False. Options: sampling (temperature, top_k,
        top_p, min_p, seed, penalties) and num_predict, stop, num_keep, shift."""
        sampling, generation = split_options(options)
        tokens = self.tokenize(prompt, add_special=True)
        pieces = self._pieces(tokens, sampling, generation)
        return pieces if stream else "".join(pieces)

    def chat(self, messages: list[dict], stream: bool = True, **options):
        return self.generate(self.apply_template(messages), stream, **options)

    def embed(self, text: str) -> list[float]:
        """The pooled embedding of text, for a model whose file declares pooling."""
        if self.engine.pooling is None:
            raise ValueError(f"This model ({self.architecture}) is generative: its file "
                             "declares no pooling, so it makes no embeddings.")
        events = queue.Queue()
        self.engine.submit(Request(self.tokenize(text, add_special=True), events.put))
        event = events.get()
        if "error" in event:
            raise RuntimeError(event["error"])
        return event["embedding"]

    def _pieces(self, tokens, sampling, generation):
        if self.engine.pooling is not None:
            raise ValueError(f"This model makes embeddings ({self.engine.pooling} pooling); "
                             "it cannot generate text.")
        events = queue.Queue()
        request = Request(tokens, events.put, sampling, generation)
        self.engine.submit(request)
        try:
            while "content" in (event := events.get()):
                yield event["content"]
            if "error" in event:
                raise RuntimeError(event["error"])
            self.last = Result(**{k: event[k] for k in Result.__dataclass_fields__})
        finally:
            request.cancel()             # a generator closed early frees its slot

    def close(self, message: str = "The model was closed.") -> None:
        self.engine.stop(message)
        self.scheduler.close()
        self.kv.buffer.close()
        self.loaded.file.close()


def load(name_or_path, progress=None, **options) -> Model:
    return Model(name_or_path, LoadOptions(**options), progress)
