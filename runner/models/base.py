"""What every model shares: metadata lookup, weights bound by name, the graph inputs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

import pyggml

from ..kvcache import LayerShape
from .keys import ROPE, ModelError  # noqa: F401  (the models import them from here)
from .keys import ATTENTION, LLM, SIZE, checked, malformed
TOKENS = "tokenizer.ggml.tokens"
BLOCK = re.compile(r"blk\.(\d+)\.")          # a repeating block's tensors: blk.<i>.<name>


class Metadata:
    """GGUF key lookup for one architecture, with gguf-py's key names. A number is checked
    against its key's rule as it is read (keys.py): one number, or with array=True (where
    a model reads the key per layer) one number or an array of them."""

    def __init__(self, meta: dict, arch: str):
        self.meta, self.arch = meta, arch

    def name(self, key: str) -> str:
        return key.format(arch=self.arch)

    def has(self, key: str) -> bool:
        return self.name(key) in self.meta

    def get(self, key: str, default=None, array: bool = False):
        name = self.name(key)
        value = self.meta.get(name)
        return default if value is None else checked(key, name, value, array)

    def require(self, key: str, array: bool = False):
        name = self.name(key)
        if name not in self.meta:
            raise ModelError(f"The model file lacks the metadata key {name}.")
        return checked(key, name, self.meta[name], array)

    def per_layer(self, key: str, layers: int, default=None) -> tuple:
        """A value given once for all layers, or as an array of one per layer."""
        value = self.require(key, array=True) if default is None else \
            self.get(key, default, array=True)
        values = tuple(value) if isinstance(value, list) else (value,) * layers
        if len(values) != layers:
            raise self.malformed(key, value, f"an array of {len(values)} values for "
                                 f"{layers} layers")
        return values

    def experts(self, required: bool = False, used_default: int = 0) -> tuple[int, int]:
        """(experts per layer, experts each token uses): none (0, ...) unless required, and
        where there are experts, between 1 and all of them used (ggml's top_k asserts)."""
        experts = self.require(LLM.EXPERT_COUNT) if required else \
            self.get(LLM.EXPERT_COUNT, 0)
        if required and not experts:
            raise self.malformed(LLM.EXPERT_COUNT, experts, "but this architecture routes "
                                 "to experts")
        used = self.get(LLM.EXPERT_USED_COUNT, used_default)
        if experts and not 1 <= used <= experts:
            raise self.malformed(LLM.EXPERT_USED_COUNT, used, "not between 1 and "
                                 f"{self.name(LLM.EXPERT_COUNT)} ({experts})")
        return experts, used

    def sliding_layers(self, layers: int, default: int) -> tuple[bool, ...]:
        """Which of the layers slide, as llama.cpp's load_swa_pattern reads
        attention.sliding_window_pattern: one bool per layer, or a number n (default where
        the file has none) that makes every n-th layer global (0: none is)."""
        key = ATTENTION.SLIDING_WINDOW_PATTERN
        pattern = self.get(key, default)
        if isinstance(pattern, list):
            if len(pattern) != layers or not all(isinstance(s, bool) for s in pattern):
                raise self.malformed(key, pattern, f"not one bool for each of the {layers} "
                                     "layers")
            return tuple(pattern)
        n = SIZE.checked(self.name(key), pattern)
        return tuple(n == 0 or i % n < n - 1 for i in range(layers))

    def layers_run(self) -> int:
        """block_count less the next-token prediction layers a file may hold past the model's
        own (nextn_predict_layers: GLM's, EXAONE's, Qwen 3.5's MTP), which are not run."""
        blocks, ahead = self.require(LLM.BLOCK_COUNT), self.get(LLM.NEXTN_PREDICT_LAYERS, 0)
        if ahead >= blocks:
            raise self.malformed(LLM.NEXTN_PREDICT_LAYERS, ahead, "which leaves no layer of "
                                 f"the {blocks} of {self.name(LLM.BLOCK_COUNT)} to run")
        return blocks - ahead

    def token_count(self) -> int:
        """The vocabulary's size: the count of tokenizer.ggml.tokens."""
        tokens = self.meta.get(TOKENS)
        if not isinstance(tokens, list):
            raise ModelError(f"The model file lacks its vocabulary ({TOKENS}, an array of "
                             "strings).")
        return len(tokens)

    def malformed(self, key: str, value, problem: str) -> ModelError:
        return malformed(self.name(key), value, problem)


class Weights:
    """The file's tensors, taken by GGUF name with a shape check; `taken` names the ones a
    model bound (the others need no memory). reader(file's tensor name): its values, for the
    small constants a model reads at bind time (GGUFFile.read)."""

    def __init__(self, tensors: dict[str, pyggml.Tensor], reader=None):
        self.tensors = tensors
        self.taken: set[str] = set()
        self.reader = reader

    def value(self, name: str):
        """The values of tensor name (float32 numpy), read from the file now; None where the
        file has no such tensor. It takes no memory (it is not taken)."""
        tensor = self.tensors.get(name)
        if tensor is None:
            return None
        if self.reader is None:
            raise ModelError(f"The tensor {name} must be read as the model binds, but these "
                             "weights came without a reader of their file.")
        return self.reader(tensor.name)

    def take(self, name: str, shape=None, dtype: str | None = None) -> pyggml.Tensor:
        """dtype: the one type the model reads it as (ggml asserts it, for a rope's
        frequency factors)."""
        tensor = self.tensors.get(name)
        if tensor is None:
            raise ModelError(f"The model file has no tensor {name}.")
        self.taken.add(name)
        if shape is not None and tensor.shape != tuple(shape):
            raise ModelError(f"The tensor {name} has shape {tensor.shape}, but the model's "
                             f"hyper-parameters need {tuple(shape)}.")
        if dtype is not None and tensor.dtype.name != dtype:
            raise ModelError(f"The tensor {name} is {tensor.dtype.name}, but the model reads "
                             f"it as {dtype}; the file is malformed.")
        return tensor

    def optional(self, name: str, shape=None, dtype: str | None = None
                 ) -> pyggml.Tensor | None:
        return self.take(name, shape, dtype) if name in self.tensors else None

    def bind(self, block: "Block", prefix: str, shapes: dict,
             optional: dict | None = None) -> None:
        """Fill block's field <name> with tensor '<prefix><name>.weight' for each name in
        shapes (and in optional, None where the file has none)."""
        block.check_declared([*shapes, *(optional or {})])
        for name, shape in shapes.items():
            setattr(block, name, self.take(f"{prefix}{name}.weight", shape))
        for name, shape in (optional or {}).items():
            setattr(block, name, self.optional(f"{prefix}{name}.weight", shape))


def weight() -> Any:
    """A required weight: a Block field that Weights.bind (or the model's own binding) sets
    before any graph reads it, never None. It is no argument of the block's __init__ and has
    no default, so Block() still makes an empty block to bind and fields() still lists it;
    read before it is bound, it raises AttributeError. A weight that some files or some
    layers lack is declared `Tensor | None = None` instead, and checked where it is read."""
    return field(init=False)


@dataclass
class Block:
    """One block's weights. Each model declares its blocks' fields in a subclass, named as
    their GGUF tensors (blk.N.<field>.weight), so that grep finds every one; Weights.bind
    fills declared fields only. Required ones are declared `name: Tensor = weight()`."""

    @classmethod
    def check_declared(cls, names) -> None:
        """Raise TypeError for a name that is not one of this block's fields."""
        declared = {f.name for f in fields(cls)}
        for name in names:
            if name not in declared:
                raise TypeError(f"{cls.__name__} declares no field {name}.")


class Transformer:
    """What decoder-only models share: construction from metadata, the embedding and output
    weights, the cache shape. Subclasses set config_class and build their blocks."""

    config_class: type[TransformerConfig]
    config: TransformerConfig     # an instance of config_class (subclasses narrow the type)
    blocks: list[Any]             # one Block (the model's own subclass) per layer
    token_embd: pyggml.Tensor     # bind_ends's
    output_norm: pyggml.Tensor
    output: pyggml.Tensor
    causal = True                 # each token sees the earlier ones only
    # its attention goes through attention() whole (no row subsets, no values projected
    # per head), so decode steps of several sequences may attend in streams (attend())
    attends_in_streams = False

    def __init__(self, config: TransformerConfig, weights: Weights) -> None:
        """Each model binds its weights (from_metadata's construction)."""
        raise NotImplementedError(f"{type(self).__name__} binds no weights.")

    @classmethod
    def config_of(cls, meta: dict):
        """The hyper-parameters the model reads from GGUF metadata (no weights needed)."""
        return cls.config_class.from_metadata(meta)

    @classmethod
    def from_metadata(cls, meta: dict, weights: Weights):
        """The model bound to weights, once the metadata is checked against itself and the
        tensors the file holds (ModelError naming the key otherwise)."""
        m = Metadata(meta, meta["general.architecture"])
        check_blocks(m, weights)
        config = cls.config_of(meta)
        config.check(m)
        check_vocabulary(m, weights)
        return cls(config, weights)

    def bind_ends(self, weights: Weights) -> None:
        """token_embd, output_norm, and output (the embeddings when the file ties them)."""
        c = self.config
        self.token_embd = weights.take("token_embd.weight", (c.vocab, c.embd))
        self.output_norm = weights.take("output_norm.weight", (c.embd,))
        self.output = weights.optional("output.weight", (c.vocab, c.embd)) or self.token_embd

    @property
    def _cut_layer(self) -> int | None:
        """The layer after whose attention only the output rows go on (Inputs.output_rows):
        the last; None (a model that says so): all rows go through every layer."""
        return len(self.blocks) - 1

    def project(self, x, inputs: Inputs):
        """(n_out, E) final-normed hidden states -> logits (n_out, vocab), or themselves when
        the graph makes embeddings."""
        return x if inputs.embeddings else self.output.mul_mat(x)

    @classmethod
    def layer_shapes(cls, config) -> list[LayerShape]:
        """The KV cache's shape per layer for config."""
        return [LayerShape(config.kv_heads, config.head_dim, config.head_dim,
                           window=config.window_of(i)) for i in range(config.layers)]

    def cache_layers(self) -> list[LayerShape]:
        return self.layer_shapes(self.config)

    def windows(self) -> tuple:
        return (None,)

    def position_axes(self) -> int:
        """Positions per token the graph reads: 1, or rope.AXES for M-RoPE (Inputs.positions
        then holds each axis's T values in turn)."""
        return 1

    def media_windows(self) -> tuple:
        """The windows (of windows()) in whose masks an image's rows see each other, not only
        their earlier rows; none: images are causal like text."""
        return ()

    def media_width(self) -> int:
        """Floats in an image row the graph reads (Inputs.media): one embedding."""
        return self.config.embd


@dataclass
class TransformerConfig:
    """Hyper-parameters every decoder-only model has (each model's config adds its own)."""
    layers: int
    embd: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    context: int
    norm_eps: float

    @classmethod
    def from_metadata(cls, meta: dict) -> TransformerConfig:
        """The hyper-parameters from GGUF metadata: each model's config reads its own."""
        raise NotImplementedError(f"{cls.__name__} reads no metadata.")

    def window_of(self, layer: int):
        """The layer's attention window (None: the whole context; kvcache.cells.first_seen
        says how each kind counts)."""
        return None

    def check(self, m: Metadata) -> None:
        """Refuse hyper-parameters that disagree with each other, naming the key (each key's
        own range was checked as it was read, keys.py). A model with more to agree adds its
        own checks after these."""
        if self.head_dim < 1:
            if m.has(ATTENTION.KEY_LENGTH):
                raise m.malformed(ATTENTION.KEY_LENGTH, self.head_dim, "an empty head")
            raise m.malformed(ATTENTION.HEAD_COUNT, self.heads, "more than "
                              f"{m.name(LLM.EMBEDDING_LENGTH)} ({self.embd}), which leaves a "
                              "head no dimensions")
        if self.kv_heads < 1 or self.heads % self.kv_heads:
            raise m.malformed(ATTENTION.HEAD_COUNT_KV, self.kv_heads, "which does not divide "
                              f"{m.name(ATTENTION.HEAD_COUNT)} ({self.heads})")


def check_blocks(m: Metadata, weights: Weights) -> None:
    """block_count within the blocks whose tensors the file holds (and the layers a model
    predicts ahead with, which a file may leave out), before any model sizes a list by it."""
    layers = m.require(LLM.BLOCK_COUNT)
    held = 1 + max((int(found.group(1)) for found in map(BLOCK.match, weights.tensors)
                    if found), default=-1)
    if layers > held + m.get(LLM.NEXTN_PREDICT_LAYERS, 0):
        raise m.malformed(LLM.BLOCK_COUNT, layers, f"more than the {held} blocks whose "
                          "tensors the file holds")


def check_vocabulary(m: Metadata, weights: Weights) -> None:
    """No more tokens than rows of the embedding table (a token beyond it would read past
    the table)."""
    tokens, table = m.meta.get(TOKENS), weights.tensors.get("token_embd.weight")
    if isinstance(tokens, list) and table is not None and len(tokens) > table.shape[0]:
        raise ModelError(f"{TOKENS} holds {len(tokens)} tokens, more than the "
                         f"{table.shape[0]} rows of the embedding table (token_embd.weight); "
                         "the file is malformed.")


@dataclass
class Inputs:
    """The graph inputs every model reads: token ids, positions, rows whose logits are kept."""
    tokens: pyggml.Tensor       # int32 (T,)
    positions: pyggml.Tensor    # int32 (T,), or (axes * T,) (Transformer.position_axes)
    outputs: pyggml.Tensor      # int32 (n_out,)
    n_tokens: int
    embeddings: bool = False    # return the final hidden states of the outputs, not logits
    # float32 (M, E), image rows' embeddings; (M, E x parts) where the model reads more
    # than one embedding a row (TextModel.media_width)
    media: pyggml.Tensor | None = None
    media_rows: pyggml.Tensor | None = None    # int32 (M,): the rows of the batch they fill
    first: list = field(default_factory=list)  # nodes the step's graph computes first

    def lookup(self, table):
        """(T, width): table's rows at the tokens, computed first in the step's graph. A
        table kept on the CPU makes its lookup a CPU piece of the graph: first, it comes
        ahead of the device's piece; later, it would cut that piece in two. (The token
        embeddings come first anyway: the outputs reach them first.)"""
        rows = table.get_rows(self.tokens)
        self.first.append(rows)
        return rows

    def output_rows(self, *rows) -> tuple:
        """Each of rows (T, ...) cut to the output rows (n_out, ...), as llama.cpp's
        inp_out_ids cuts them after the last layer's attention: the rest of that layer (its
        output projection, its FFN or experts) then computes only the rows whose logits
        are read (one of a prompt's 512, not all of them)."""
        return tuple(r.get_rows(self.outputs) for r in rows)

    def splice(self, x):
        """x (T, E), the token embeddings, with the image rows in place of their tokens'.
        The rows go into a copy: written into the lookup's own node, which lives with the
        embeddings on the CPU, the write ran on the layers' device against CPU memory (it
        crashed an RPC server)."""
        return x if self.media is None else x.cont().set_rows(self.media_part(0, x.shape[1]),
                                                              self.media_rows)

    def media_part(self, part: int, width: int):
        """(M, width): the part-th embedding of each image row."""
        media = self.media
        assert media is not None                        # read only where a batch has images
        if media.shape[1] == width:
            return media
        row, item = media.strides
        return media.view((media.shape[0], width), part * width * item, (row, item)).cont()
