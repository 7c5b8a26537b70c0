"""One model a server offers (Entry): its file, what its manifest adds, and what the file's
header tells of it (capabilities, details), the headers parsed once per file version."""

from __future__ import annotations

import datetime
import functools
import logging
import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gguf import GGMLQuantizationType

from pyggml.gguf_reader import Header

from ...tokenizer.renderers import Render, renderer_named
from ...tokenizer.template import renderer_for, template_for
from ..formats.fim import fim_tokens
from ..formats.parsers import parser_named

log = logging.getLogger(__name__)

# the architectures whose single files' vision towers the runner reads (models/vision/
# ollama.py's LAYOUTS; named here, as the server loads no model code: a test holds them equal)
SINGLE_FILE_VISION = ("gemma3", "gemma4", "mistral3", "qwen25vl", "qwen35", "qwen35moe")

# general.file_type as llama.cpp's converter writes it (llama_ftype)
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
              10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S",
              15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}
THINK_MARKERS = ("<think>", "enable_thinking", "<|channel>", "reasoning_content",
                 "reasoning_effort")


def header_of(path: Path) -> Header:
    """A GGUF file's header, parsed once per file version (path, size and mtime): a model's
    vocabulary is tens of megabytes of metadata, read by every request that names it."""
    stat = path.stat()
    with _PARSING:                  # requests that arrive together parse the file once
        return _parsed(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


_PARSING = threading.Lock()


@functools.lru_cache(maxsize=8)
def _parsed(path: str, size: int, mtime_ns: int) -> Header:
    return Header(path)


@dataclass
class Entry:
    """One model: its file, and what its manifest adds."""
    name: str
    path: Path
    digest: str                       # sha256 hex of the GGUF file
    template: str | None = None       # overrides the file's chat template
    system: str | None = None
    parameters: dict = field(default_factory=dict)
    projector: Path | None = None     # the vision encoder's mmproj file
    messages: list | None = None      # a conversation every chat starts with (MESSAGE)
    license: str | None = None
    go_template: str | None = None    # a pulled model's Ollama template (the file's wins)
    manifest_digest: str | None = None   # sha256 hex of its manifest: what /api/tags shows
    renderer: str | None = None       # Ollama's renderer name (a pulled model's config)
    parser: str | None = None         # Ollama's parser name: its replies' format
    _metadata: dict | None = field(default=None, repr=False)
    _projector_metadata: dict | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    @property
    def modified_at(self) -> str:
        return rfc3339(self.path.stat().st_mtime)

    @property
    def metadata(self) -> dict:
        if self._metadata is None:
            self._metadata = header_of(self.path).metadata
        return self._metadata

    @property
    def architecture(self) -> str:
        return self.metadata.get("general.architecture", "unknown")

    @property
    def chat_template(self) -> str | None:
        """The Jinja template: the manifest's, the file's own, else (unless the model was
        pulled with Ollama's Go template, which then wins) the family's fallback."""
        return self.template or self.metadata.get("tokenizer.chat_template") or \
            (None if self.go_template else template_for(self.metadata))

    def named_renderer(self) -> Render | None:
        """The renderer in code Ollama's config names, for a model with no Jinja template of
        its own (the manifest's or the file's win, as they do over its Go template). A name
        this server does not render is logged once and left to the model's other templates
        (its Go template, its family's, else the "no chat template" error): the model may
        still answer through them, where refusing it would leave a pulled model unusable."""
        if not self.renderer or self.template or self.metadata.get("tokenizer.chat_template"):
            return None
        found = renderer_named(self._renderer_name())
        if found is None and (self.name, self.renderer) not in _UNRENDERED:
            _UNRENDERED.add((self.name, self.renderer))
            log.warning('%s names Ollama\'s renderer "%s", which this server does not '
                        "render; its prompts come from its template instead.", self.name,
                        self.renderer)
        return found

    def _renderer_name(self) -> str | None:
        """Ollama's "gemma4" is its small or large variant (server/renderer_resolution.go):
        by the model's name (e2b, e4b; 12b, 26b, 31b), else by its size (12B and up)."""
        if self.renderer != "gemma4":
            return self.renderer
        lower = self.name.lower()
        if "e2b" in lower or "e4b" in lower:
            return "gemma4-small"
        if any(size in lower for size in ("12b", "26b", "31b")):
            return "gemma4-large"
        parameters = sum(math.prod(t.ne) for t in header_of(self.path).tensors)
        return "gemma4-large" if parameters >= 12_000_000_000 else "gemma4-small"

    @property
    def context_length(self) -> int:
        """The file's context_length (a maximum), 2048 where it gives none; a value that is
        no positive whole number counts as none here, and its runner refuses the file
        naming the key (runner/models/keys.py)."""
        value = self.metadata.get(f"{self.architecture}.context_length")
        return value if type(value) is int and value > 0 else 2048

    def capabilities(self) -> list[str]:
        meta, arch = self.metadata, self.architecture
        template = self.chat_template or self.go_template or ""
        found = ["embedding" if meta.get(f"{arch}.pooling_type") else "completion"]
        built_in = renderer_for(meta) is not None        # harmony: tools and reasoning
        parser = parser_named(self.parser)               # what Ollama's parser reads
        if "tools" in template or built_in or (parser and parser.tools):
            found.append("tools")
        if any(marker in template for marker in THINK_MARKERS) or built_in or \
                (parser and parser.thinking):
            found.append("thinking")
        if "suffix" in template or fim_tokens(meta):
            found.append("insert")
        towers = self.projector_metadata() or meta
        if towers.get("clip.has_vision_encoder") or (
                meta.get("general.architecture") in SINGLE_FILE_VISION and
                any(key.endswith("vision.block_count") for key in towers)):
            found.append("vision")
        if towers.get("clip.has_audio_encoder") or \
                any(key.endswith("audio.block_count") for key in towers):
            found.append("audio")
        return found

    def projector_metadata(self) -> dict | None:
        if self.projector is not None and self._projector_metadata is None:
            self._projector_metadata = header_of(self.projector).metadata
        return self._projector_metadata

    def projector_info(self) -> dict | None:
        """The projector file's metadata, as Ollama's show reports it."""
        meta = self.projector_metadata()
        if meta is None:
            return None
        return {k: v for k, v in meta.items() if not k.startswith("tokenizer.")}

    def details(self) -> dict:
        meta = self.metadata
        header = header_of(self.path)
        parameters = sum(math.prod(t.ne) for t in header.tensors)
        file_type = meta.get("general.file_type")
        if file_type is None:
            counts = Counter(type_name(t.type) for t in header.tensors)
            quantization = counts.most_common(1)[0][0] if counts else "unknown"
        else:
            quantization = FILE_TYPES.get(file_type, f"file type {file_type}")
        return {"parent_model": "", "format": "gguf", "family": self.architecture,
                "families": [self.architecture], "parameter_size": human(parameters),
                "quantization_level": quantization}


_UNRENDERED: set[tuple[str, str]] = set()      # (model, renderer) already logged


def human(count: int) -> str:
    """135M, 1.5B: parameter counts as Ollama prints them."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            value = count / size
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
    return str(count)


def rfc3339(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc) \
        .isoformat(timespec="microseconds").replace("+00:00", "Z")


def type_name(ggml_type: int) -> str:
    """A tensor type's name as llama.cpp prints it (Q4_K, F16)."""
    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"type {ggml_type}"
