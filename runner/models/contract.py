"""What the engine and the loader call on a model: the contracts as code, and the registries
that find a model's class by the name its GGUF file declares.

A text model (TextModel) turns a batch's inputs and the KV cache into logits; a projector
(Projector) turns an image or a clip of audio into embedding rows the text model reads in
place of tokens. Models know nothing of sequences, slots, threads or HTTP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Generic, Iterator, Protocol, TypeVar

if TYPE_CHECKING:
    import pyggml

    from ..kvcache import LayerShape
    from .base import Inputs, TransformerConfig, Weights
    from .vision.pixels import Layout, Pixels

T = TypeVar("T", bound=type)


class TextModel(Protocol):
    """A decoder (or, with causal False, an encoder such as BERT) over a KV cache."""

    config: TransformerConfig       # layers, embd, vocab, context, ...
    causal: bool                    # False: every token of a sequence sees every other

    @classmethod
    def config_of(cls, meta: dict) -> TransformerConfig:
        """The hyper-parameters, from GGUF metadata alone (placement sizes them)."""

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights) -> TextModel:
        """The model, its weights bound by GGUF tensor name."""

    @classmethod
    def layer_shapes(cls, config) -> list[LayerShape]:
        """The KV cache's shape per layer for config (placement sizes the cache)."""

    def cache_layers(self) -> list[LayerShape]:
        """layer_shapes of this model's own config."""

    def windows(self) -> tuple:
        """The attention windows its layers use (None: the whole context); the cache makes
        one mask per window."""

    def media_windows(self) -> tuple:
        """The windows in whose masks an image's rows see each other both ways."""

    def media_width(self) -> int:
        """Floats in an image row its graph reads: embd, or more (Qwen3-VL's deepstack
        embeddings follow the row's own); a projector's rows must be as wide."""

    def position_axes(self) -> int:
        """Positions per token its graph reads (1; 4 with M-RoPE: time, row, column, none)."""

    def forward(self, inputs: Inputs, kv) -> pyggml.Tensor:
        """The graph from the batch's inputs through the cache: logits (n_out, vocab), or the
        final hidden states (n_out, embd) when inputs.embeddings."""

    def shift(self, k: pyggml.Tensor, deltas: pyggml.Tensor, layer: int) -> pyggml.Tensor:
        """Cached keys k of layer re-rotated by position deltas (a context shift)."""


class Projector(Protocol):
    """An image (or audio) encoder and the projection into the text model's embeddings."""

    layout: Layout                  # the token texts around its rows in the prompt
    max_rows: int                   # the most rows one item becomes
    # optional: floats in each row it makes, where more than config.projection (Qwen3-VL)
    row_width: int

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights) -> Projector:
        """The projector, its weights bound by mmproj tensor name (v.*, mm.*, a.*)."""

    def preprocess(self, item) -> Pixels:
        """A decoded image (RGB) or 16 kHz samples to the arrays its graph reads, as the
        family's reference processor makes them."""

    def largest(self) -> Pixels:
        """The largest item's arrays, to measure and reserve compute memory with."""

    def forward(self, patches: pyggml.Tensor, grid: tuple[int, int], *,
                flash: bool = False, **inputs: pyggml.Tensor) -> pyggml.Tensor:
        """The encoder graph: rows (rows, text embd). inputs: Pixels.inputs by name."""


class Registry(Generic[T]):
    """Classes by the name a GGUF file declares (general.architecture,
    clip.projector_type): a name registered twice is refused, an unknown one is answered
    with the names known."""

    def __init__(self, what: str):
        self.what = what
        self._classes: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(cls: T) -> T:
            if name in self._classes:
                raise ValueError(f"The {self.what} {name!r} is registered twice "
                                 f"({self._classes[name].__name__} and {cls.__name__}).")
            self._classes[name] = cls
            return cls

        return add

    def __getitem__(self, name: str) -> T:
        try:
            return self._classes[name]
        except KeyError:
            raise ValueError(f"Unknown {self.what} {name!r}; this runner knows "
                             f"{', '.join(sorted(self._classes))}.") from None

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._classes))

    def __contains__(self, name: str) -> bool:
        return name in self._classes


# The registries, here rather than in the packages' __init__ modules, so that a model module
# imports what it registers with without importing its own package back
ARCHITECTURES: Registry = Registry("architecture")
register = ARCHITECTURES.register
PROJECTORS: Registry = Registry("projector type")
register_projector = PROJECTORS.register
