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

import logging
import queue
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace

import pyggml
from pyggml.cpus import available_cpus

from . import defaults
from .engine.executor import Executor
from .engine.loop import Engine
from .engine.options import GenerateOptions
from .engine.request import Request
from .kvcache.causal import check_cache_type
from .loading.devices import Backends, DeviceOptions
from .loading.fit import Footprint, Workload, choose_layers, measure
from .loading.loader import Loaded, open_model
from .loading.placement import Placer
from .multimodal.encoder import Encoder
from .multimodal.projector_memory import add_allocated
from .multimodal.prompts import Multimodal
from .sample import SamplingOptions
from .sample.grammar import AfterThinking, Constraint, compile_grammar
from .tokenizer.template import render, renderer_for, template_for, with_image_tags

log = logging.getLogger("runner")


@dataclass
class LoadOptions:
    num_ctx: int = defaults.CONTEXT          # tokens one sequence holds
    parallel: int = defaults.PARALLEL        # sequences sharing the KV cache (num_ctx each)
    batch_size: int = defaults.BATCH
    threads: int | None = None   # the CPU's
    flash_attn: bool | None = None   # None: auto (defaults.flash_attention)
    kv_cache_type: str = defaults.KV_CACHE_TYPE
    repack: bool = True          # repacked CPU weight layouts, as llama.cpp by default
    multiuser_cache: bool = False   # fork the best cached prefix into the LRU slot
    swa_full: bool = False       # sliding-window layers keep the whole context, not their window
    checkpoints: int | None = None   # recurrent states kept per sequence (None: by size)
    overlap: bool = True         # build the next batch's graph while one computes (and
                                 # queue greedy steps behind it on the CPU) where a CPU is
                                 # left beside ggml's threads or no layer is on the CPU
    use_mmap: bool = True        # CPU weights point into the file
    devices: DeviceOptions = field(default_factory=DeviceOptions)   # GPUs and RPC servers

    def __post_init__(self):
        for name in ("num_ctx", "batch_size", "parallel"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}.")
        self.flash_attn = defaults.flash_attention(self.flash_attn, self.kv_cache_type)
        check_cache_type(self.kv_cache_type, self.flash_attn)
        if self.checkpoints is not None and (isinstance(self.checkpoints, bool) or
                                             not isinstance(self.checkpoints, int) or
                                             not 0 <= self.checkpoints <= 64):
            raise ValueError(f"checkpoints must be an integer in [0, 64], not "
                             f"{self.checkpoints!r}.")


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
    prompt_eval_count: int         # the prompt's tokens (Ollama's count: all of them)
    eval_count: int                # tokens generated
    prompt_eval_duration: int      # nanoseconds, from the request (tokenizing included)
    eval_duration: int
    prompt_cached_count: int = 0   # of the prompt's tokens, those the cache held already


class Model:
    """A loaded model and its batch loop (parallel slots, prompt cache), its layers on the
    devices the options choose (loading/fit.py, loading/placement.py)."""

    def __init__(self, loaded: Loaded, options: LoadOptions, progress=None):
        self.options = options
        self.loaded = loaded
        self.tokenizer = self.loaded.tokenizer
        model = self.loaded.model
        self.workload = workload_of(model, options, self.loaded.pooling)
        self.backends = Backends(options.threads)
        with Placer(model, self.loaded.tensors, self.workload.embeddings) as placer:
            layers = choose_layers(model, placer, options.devices, self.workload, self.backends,
                                   options.repack, self.loaded)
            self.placement = placer.place(layers, options.repack)
        log.info("placement", extra={"layers": [d.name for d in layers]})
        try:
            self.loaded.load(self.placement, progress, options.use_mmap)
            self.multimodal = self._see(layers[-1]) if loaded.projectors else None
            # an image's rows go in one batch: the largest batch is at least one image
            batch = max(options.batch_size,
                        self.multimodal.max_rows if self.multimodal else 0)
            self.workload = replace(self.workload, batch=batch)
            shapes = model.cache_layers()
            self.kv = self.workload.cache(shapes, [self.backends[d] for d in layers[:len(shapes)]])
            # The loop's Python works beside a compute (overlap) where no layer is on the
            # CPU, or a CPU is left beside ggml's threads: on a CPU of theirs it slows every
            # thread at every barrier more than it saves (2 threads on 2 CPUs: overlapped,
            # 0.95-0.98 of this; bench/overlap.py). GPUs and RPC servers queue a graph and
            # return: started from the loop's own thread, a step spares two thread
            # hand-offs. CPU layers compute on the scheduler's compute thread where the loop
            # overlaps, else on the loop's thread as llama.cpp's main thread computes (woken
            # on a CPU of ggml's, a compute thread waited for one at every step).
            output, cpu = layers[-1], self.backends[pyggml.cpu_device()]
            on_cpu = any(d.is_cpu for d in layers)
            overlap = options.overlap and (not on_cpu or cpu.threads < available_cpus())
            self.scheduler = pyggml.Scheduler(self.backends.ordered(self.placement.devices),
                                              inline=not (on_cpu and overlap))
            # greedy steps chain: each is queued behind the last and takes its token from
            # the last one's choices where the output layer lies, with no host in between
            chains = not on_cpu or (output.is_cpu and overlap)
            self.executor = Executor(model, self.kv, self.scheduler,
                                     choose_on_device=not output.is_cpu or chains,
                                     chain_on=self.backends[output] if chains else None,
                                     chain_rows=options.parallel,
                                     candidates_on_device=not output.is_cpu)
            self.engine = Engine(self.executor, self.tokenizer, options.parallel, batch,
                                 options.multiuser_cache, overlap, self.loaded.pooling)
            self.engine.reserve()
        except Exception:
            self._free()
            raise
        self.engine.start()
        self.template = template_for(self.loaded.metadata)
        self.last: Result | None = None

    def _see(self, device: pyggml.Device) -> Multimodal:
        """The image and audio encoders, on the output layer's device, each with its own
        scheduler and its compute memory reserved."""
        self.loaded.load_projector(device, self.options.use_mmap)
        self._encoders: dict[str, Encoder] = {}       # closed with the model if one fails
        encoders = self._encoders
        flash = self.options.flash_attn
        assert flash is not None                       # __post_init__ resolved auto
        for modality, projector in self.loaded.projectors.items():
            scheduler = pyggml.Scheduler(self.backends.ordered(self.placement.devices))
            encoder = encoders[modality] = Encoder(projector, scheduler, flash=flash)
            scheduler.reserve(encoder.worst_case())
        return Multimodal(encoders, self.tokenizer)

    @property
    def backend(self) -> pyggml.Backend:
        """The CPU backend (its thread count)."""
        return self.backends[pyggml.cpu_device()]

    @property
    def architecture(self) -> str:
        return self.loaded.architecture

    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True
                 ) -> list[int]:
        return self.tokenizer.encode(text, add_special, parse_special)

    def detokenize(self, tokens) -> str:
        return self.tokenizer.decode(tokens)

    def apply_template(self, messages: list[dict]) -> str:
        built_in = renderer_for(self.loaded.metadata)
        if built_in is not None:
            return built_in[1](messages)
        if self.template is None:
            raise ValueError("This model has no chat template; generate with raw prompts.")
        vocab = self.tokenizer.vocab
        name = (lambda i: vocab.tokens[i] if i is not None else "")
        return render(self.template, messages, bos=name(vocab.bos), eos=name(vocab.eos))

    def generate(self, prompt: str, stream: bool = True, format=None, grammar: str = "",
                 images: list[bytes] | None = None, audio: list[bytes] | None = None,
                 **options):
        """Continue prompt (tokenized with BOS as the model asks). Streams text pieces, or
        returns the whole text with stream=False. Options: sampling (temperature, top_k,
        top_p, min_p, seed, penalties) and num_predict, stop, num_keep, shift. format: "json"
        or a JSON Schema the output must follow; grammar: a GBNF grammar instead. images:
        encoded images (JPEG, PNG, WebP...) and audio (WAV, FLAC, Ogg; told apart by content,
        so audio may come in images as Ollama sends it), where the prompt's [img-N] tags say
        (audio numbered after the images), else first."""
        sampling, generation = split_options(options)
        if audio:
            images = [*(images or []), *audio]
        tokens = self.prompt_items(prompt, images)
        pieces = self._pieces(tokens, sampling, generation, self.constraint(format, grammar))
        return pieces if stream else "".join(pieces)

    def prompt_items(self, prompt: str, images: list[bytes] | dict[int, bytes] | None = None
                     ) -> list:
        """The prompt's token ids, with its images' and audio's rows where they go."""
        if not images:
            return self.tokenize(prompt, add_special=True)
        if self.multimodal is None:
            raise ValueError(self.loaded.unread or
                             f"This model ({self.architecture}) reads text only; it cannot "
                             "take images or audio (load it with its projector).")
        return self.multimodal.prompt(prompt,
                                      images if isinstance(images, dict) else list(images))

    def constraint(self, format=None, grammar: str = "", think_tags=None,
                   think_opened: bool = False) -> Constraint | AfterThinking | None:
        """The grammar a request's format or GBNF grammar imposes (GrammarError if bad);
        think_tags (open, close): the grammar holds the answer, not the thinking between
        them (think_opened: the prompt opened it)."""
        vocab_size = self.loaded.model.config.vocab
        text = compile_grammar(self.tokenizer, vocab_size, format, grammar)
        if text is None:
            return None
        constraint = Constraint(self.tokenizer, vocab_size, text)
        if think_tags:
            return AfterThinking(constraint, self.tokenizer, tuple(think_tags), think_opened)
        return constraint

    def generate_batch(self, prompts: list[str], **options) -> list[str]:
        """Continue several prompts together: they start in the same batch and advance side
        by side (parallel at a time; the others wait for a slot). Returns their texts."""
        sampling, generation = split_options(options)
        events: queue.Queue[tuple[int, dict]] = queue.Queue()

        def emitter(index: int) -> Callable[[dict], None]:
            return lambda event: events.put((index, event))

        requests = [Request(self.tokenize(prompt, add_special=True), emitter(index),
                            sampling, generation) for index, prompt in enumerate(prompts)]
        texts, running = [""] * len(prompts), len(prompts)
        self._check_generative()
        self.engine.submit(*requests)
        try:
            while running:
                index, event = events.get()
                if "error" in event:
                    raise RuntimeError(event["error"])
                if "content" in event:
                    texts[index] += event["content"]
                else:
                    running -= 1
        finally:
            for request in requests:
                request.cancel()
        return texts

    def chat(self, messages: list[dict], stream: bool = True, **options):
        """messages may carry images (a list of encoded images each, audio among them as
        Ollama's do) and audio."""
        messages, images = with_image_tags(messages)
        return self.generate(self.apply_template(messages), stream, images=images, **options)

    def embed(self, text: str) -> list[float]:
        """The pooled embedding of text, for a model whose file declares pooling."""
        if self.engine.pooling is None:
            raise ValueError(f"This model ({self.architecture}) is generative: its file "
                             "declares no pooling, so it makes no embeddings.")
        events: queue.Queue[dict] = queue.Queue()
        self.engine.submit(Request(self.tokenize(text, add_special=True), events.put))
        event = events.get()
        if "error" in event:
            raise RuntimeError(event["error"])
        return event["embedding"]

    def _check_generative(self) -> None:
        if self.engine.pooling is not None:
            raise ValueError(f"This model makes embeddings ({self.engine.pooling} pooling); "
                             "it cannot generate text.")

    def _pieces(self, tokens, sampling, generation, constraint=None):
        self._check_generative()
        events = queue.Queue()
        request = Request(tokens, events.put, sampling, generation, constraint=constraint)
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
        self._free()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _free(self) -> None:
        for encoder in getattr(self, "_encoders", {}).values():
            encoder.close()
            encoder.scheduler.close()
        for part in ("scheduler", "executor", "kv"):
            if hasattr(self, part):
                getattr(self, part).close()
        self.loaded.close()
        self.backends.close()      # an RPC server's connection ends with its last user

    def footprint(self) -> Footprint:
        """The memory this model holds, per device and layer, read off its allocations."""
        graph = {b.device.name: self.scheduler.buffer_size(b) for b in self.scheduler.backends}
        footprint = Footprint.of(self.loaded.tensors, self.placement, self.kv, graph)
        add_allocated(footprint, getattr(self, "_encoders", {}),
                      self.loaded.projector_tensors or {}, self.placement)
        return footprint

    def failure(self) -> str | None:
        """Why the model can no longer compute (a device on another machine went away)."""
        return self.scheduler.failure()


def workload_of(model, options: LoadOptions, pooling: str | None) -> Workload:
    """The cache and batch a model loaded with options holds: num_ctx per sequence (at most
    the trained context) for each parallel sequence."""
    context = min(options.num_ctx, getattr(model.config, "context", options.num_ctx))
    flash = options.flash_attn
    assert flash is not None                           # LoadOptions.__post_init__ resolved auto
    cache_type = options.kv_cache_type
    if pooling is not None and cache_type == "f16" and not flash:
        # an encoder's cache holds only the batch it embeds: in f32 its keys and values are
        # exact, as in llama.cpp's encoders, which keep no cache (f16 moved them by ~3e-4)
        cache_type = "f32"
    return Workload(context, options.parallel, cache_type, flash,
                    options.batch_size, embeddings=pooling is not None,
                    swa_full=options.swa_full, checkpoints=options.checkpoints)


def footprint_of(opened: Loaded, options: LoadOptions) -> Footprint:
    """What loading opened with options would take on each device (weights, cache, compute
    memory), measured without allocating: as load() places and fits it."""
    workload = workload_of(opened.model, options, opened.pooling)
    backends = Backends(options.threads)
    try:
        with Placer(opened.model, opened.tensors, workload.embeddings) as placer:
            layers = choose_layers(opened.model, placer, options.devices, workload, backends,
                                   options.repack, opened)
            return measure(opened.model, opened.tensors, placer.place(layers, options.repack),
                           workload, backends, opened)
    finally:
        backends.close()


DEVICE_OPTIONS = {f.name for f in fields(DeviceOptions)}


def load(name_or_path, progress=None, pull: bool = True, projector=None, **options) -> Model:
    """A model by catalog name (pulled first if missing, unless pull=False) or GGUF path;
    projector: its vision encoder's mmproj file. Options of LoadOptions, and of
    DeviceOptions (num_gpu, main_gpu, tensor_split, rpc)."""
    devices = {k: options.pop(k) for k in list(options) if k in DEVICE_OPTIONS}
    if devices:
        options["devices"] = DeviceOptions(**devices)
    load_options = LoadOptions(**options)
    return Model(open_model(name_or_path, pull, projector), load_options, progress)
