"""The Python API.

    import runner
    model = runner.load("smollm2:135m")            # a pulled name or a GGUF path
    for piece in model.generate("Why is the sky blue?", temperature=0):
        print(piece, end="")
    model.chat([{"role": "user", "content": "Hi"}], stream=False)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields

import pyggml

from .chat import render, template_for
from .executor import Executor
from .generate import GenerateOptions, Result, Sequence, generate
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

    def __post_init__(self):
        for name in ("num_ctx", "batch_size", "parallel"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}.")


def split_options(options: dict, ignored=frozenset()) -> tuple[SamplingOptions,
                                                                 GenerateOptions]:
    """Sampling and generation options from one dict of Ollama option names; a name neither
    knows (nor listed in ignored) is an error that lists the known ones."""
    sampling_names = {f.name for f in fields(SamplingOptions)}
    generate_names = {f.name for f in fields(GenerateOptions)}
    unknown = set(options) - sampling_names - generate_names - set(ignored)
    if unknown:
        raise ValueError(f"Unknown option(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(sorted(sampling_names | generate_names))}.")
    return (SamplingOptions(**{k: v for k, v in options.items() if k in sampling_names}),
            GenerateOptions(**{k: v for k, v in options.items() if k in generate_names}))


class Model:
    """A loaded model with one conversation slot (the server's engine adds more)."""

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
        self.sequence = Sequence(self.executor, self.tokenizer, options.batch_size)
        self.template = template_for(self.loaded.metadata)
        self._lock = threading.Lock()
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

    def _pieces(self, tokens, sampling, generation):
        with self._lock:
            self.last = Result()
            yield from generate(self.sequence, tokens, sampling, generation, self.last)

    def close(self) -> None:
        self.scheduler.close()
        self.kv.buffer.close()
        self.loaded.file.close()


def load(name_or_path, progress=None, **options) -> Model:
    return Model(name_or_path, LoadOptions(**options), progress)
