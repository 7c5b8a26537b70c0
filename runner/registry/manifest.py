"""A registry's manifest, read as Ollama's server/images.go reads one (types: a JSON object,
"layers" a list of {mediaType, digest, size}, "config" one such object or none), and checked
before anything is fetched: a digest is sha256:<64 hex>, a size a whole number of bytes a
Go int64 holds (not a float, a string or a boolean), at most LAYERS_MAX layers. What is not
so is refused (errors.Refused) with a sentence naming the part and the value."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .errors import Refused
from .limits import LAYERS_MAX, SIZE_MAX

MEDIA = "application/vnd.ollama.image."
DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Layer:
    media_type: str
    digest: str
    size: int

    @property
    def kind(self) -> str | None:
        """The Ollama layer kind ("model", "template", ...), None for other media types."""
        media = self.media_type
        return media[len(MEDIA):] if media.startswith(MEDIA) else None

    @property
    def hex(self) -> str:
        return self.digest[7:]


@dataclass(frozen=True)
class Manifest:
    layers: tuple[Layer, ...]
    config: Layer | None                 # the config blob (the renderer and parser), if any

    @property
    def blobs(self) -> tuple[Layer, ...]:
        """What is fetched: the layers, then the config."""
        return self.layers + ((self.config,) if self.config else ())


def loads(text: bytes | str, what: str):
    """JSON text as Python values; Refused (what: "The manifest of x", ...) when it is not
    JSON or is nested deeper than the parser goes."""
    try:
        return json.loads(text)
    except RecursionError:
        raise Refused(f"{what} is JSON nested too deeply to read; it was refused.") from None
    except ValueError as error:
        raise Refused(f"{what} is not JSON ({error}); it was refused.") from None


def parse(text: bytes, name: str) -> Manifest:
    """The manifest of name (its display) from the registry's answer."""
    whose = f"the manifest of {name}"
    what = whose[0].upper() + whose[1:]
    found = loads(text, what)
    if not isinstance(found, dict):
        raise Refused(f"{what} is a JSON {_kind(found)}, not an object; it was refused.")
    layers = found.get("layers")
    if not isinstance(layers, list) or not layers:
        raise Refused(f"{what} has no list of layers; it was refused.")
    if len(layers) > LAYERS_MAX:
        raise Refused(f"{what} has {len(layers)} layers, more than the {LAYERS_MAX} a model "
                      "has; it was refused.")
    config = found.get("config")
    if config is not None and not isinstance(config, dict):
        raise Refused(f"The config of {whose} is a JSON {_kind(config)}, not an object; the "
                      "manifest was refused.")
    return Manifest(tuple(_layer(layer, f"layer {n} of {whose}")
                          for n, layer in enumerate(layers)),
                    _layer(config, f"config of {whose}") if config and config.get("digest")
                    else None)


def _layer(value, where: str) -> Layer:
    if not isinstance(value, dict):
        raise Refused(f"The {where} is a JSON {_kind(value)}, not an object; the manifest "
                      "was refused.")
    media, digest, size = value.get("mediaType", ""), value.get("digest"), value.get("size")
    if not isinstance(media, str):
        raise Refused(f"The mediaType of the {where} is {_shown(media)}, not a string; the "
                      "manifest was refused.")
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise Refused(f"The digest of the {where} is {_shown(digest)}, not sha256:<64 hex "
                      "digits>; the manifest was refused.")
    if type(size) is not int or not 0 <= size <= SIZE_MAX:
        raise Refused(f"The size of the {where} ({digest[:19]}) is {_shown(size)}, which is "
                      "not a size: a whole number of bytes from 0 to 2^63-1. The manifest "
                      "was refused.")
    return Layer(media, digest, size)


def _kind(value) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def _shown(value) -> str:
    text = json.dumps(value) if isinstance(value, (int, float, str, bool, type(None))) \
        else f"a JSON {_kind(value)}"
    return text if len(text) <= 40 else text[:37] + "..."
