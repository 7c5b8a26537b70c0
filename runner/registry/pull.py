"""`pull NAME`: a model from Ollama's registry (or another that speaks its API) or from
Hugging Face, into the store as a model the server lists, shows, runs, copies and deletes.

From a registry (server/images.go's PullModel): the manifest, then each layer's blob by
digest (download.py: parallel, resumable, verified, within the bounds of
limits.py); the small layers are read into the
store's manifest: the Go template (kept beside the GGUF's own chat template, which wins),
the system prompt, params (the model's default options), messages and license; and from the
config blob, the names of the renderer and parser Ollama builds the model's prompts and
reads its replies with (families whose GGUF carries no template). Progress is
reported as Ollama's /api/pull streams it: {"status": "pulling manifest"}, then per layer
{"status": "pulling <12 hex>", "digest", "total", "completed"}, "verifying sha256 digest",
"writing manifest", "success".

hf.co/USER/REPO[:QUANT] goes to Hugging Face instead (huggingface.py).
"""

from __future__ import annotations

import threading
from typing import Callable

from .download import sweep
from .errors import PullError, Refused
from .guard import Guard
from .limits import Limits, free_bytes, megabytes
from .manifest import Layer, Manifest, loads
from .names import ModelName
from .transfer import Registry

# a layer's kind -> what the store's manifest keeps of it
LAYERS = {"model": "model", "projector": "projector", "template": "go_template",
          "prompt": "go_template", "system": "system", "params": "parameters",
          "messages": "messages", "license": "license"}
# the JSON layers: what each must be, and a check that it is
JSON_LAYERS = {"params": ("object", lambda value: isinstance(value, dict)),
               "messages": ("array of objects", lambda value: isinstance(value, list) and
                            all(isinstance(message, dict) for message in value))}
SMALL = 1 << 20                         # text layers larger than this are not read
Progress = Callable[[dict], None]


def pull(text: str, library, insecure: bool = False, progress: Progress = lambda _: None,
         cancelled: threading.Event | None = None, limits: Limits | None = None):
    """Pull the model text names into library; its Entry. PullError (one sentence) when it
    cannot be: nothing half-written is left where a model is looked up. cancelled: set, it
    stops the pull (its parts kept); limits: the bounds (else from the environment)."""
    try:
        name = ModelName.parse(text)
    except ValueError as error:
        raise PullError(str(error), 400) from None
    limits = limits or Limits.from_environment()
    guard = Guard(cancelled, name.display)
    sweep(library.blobs, limits.partial_days)
    if name.on_hugging_face:
        from .huggingface import pull_hugging_face

        return pull_hugging_face(name, library, progress, limits, guard)
    registry = Registry(name, insecure, limits, guard)
    try:
        progress({"status": "pulling manifest"})
        manifest = registry.manifest()
        _check_kinds(manifest, name)
        _check_room(manifest, library.blobs)
        for layer in manifest.blobs:
            status = f"pulling {layer.hex[:12]}"

            def report(completed: int, layer=layer, status=status):
                progress({"status": status, "digest": layer.digest, "total": layer.size,
                          "completed": completed})

            registry.fetch(registry.blob_url(layer.digest), layer.digest, layer.size,
                           library.blobs, report)
    finally:
        registry.close()
    progress({"status": "verifying sha256 digest"})          # each blob was, as it landed
    fields = _config(library, manifest.config)
    for layer in manifest.layers:
        kind = layer.kind
        if kind in ("model", "projector"):
            fields[LAYERS[kind]] = layer.digest
        elif kind in LAYERS and layer.size <= SMALL:
            fields[LAYERS[kind]] = _read(library, layer, name)
    progress({"status": "writing manifest"})
    try:
        entry = library.add_pulled(name.display, fields)
    except ValueError as error:
        raise PullError(f"{name.display}'s model layer is not a GGUF file this runner reads "
                        f"({error}); no model was stored.") from None
    progress({"status": "success"})
    return entry


def _check_kinds(manifest: Manifest, name: ModelName) -> None:
    kinds = [layer.kind for layer in manifest.layers]
    if "adapter" in kinds:
        raise Refused(f"{name.display} has a LoRA adapter layer, which this runner does not "
                      "apply; nothing was stored.")
    if kinds.count("model") != 1:
        raise Refused(f"The manifest of {name.display} has {kinds.count('model')} model "
                      "layers, not one; nothing was stored.")


def _check_room(manifest: Manifest, blobs) -> None:
    """507 before anything is fetched when the layers not yet stored cannot fit."""
    missing = {layer.digest: layer.size for layer in manifest.blobs
               if not (blobs / f"sha256-{layer.hex}").exists()}
    needed, free = sum(missing.values()), free_bytes(blobs)
    if needed > free:
        raise PullError(f"The layers of this model need {megabytes(needed)} and the disk of "
                        f"{blobs} has {megabytes(free)} free; free some space and pull "
                        "again.", 507)


def _config(library, config: Layer | None) -> dict:
    """The config blob's "renderer" and "parser" (types/model/config.go's ConfigV2), where
    it names them; a config that is not a JSON object names none (Ollama's older manifests
    and other registries' carry other things there)."""
    if config is None or config.size > SMALL or \
            not (library.blobs / f"sha256-{config.hex}").is_file():
        return {}
    try:
        found = loads(_text(library, config), "The config")
    except Refused:
        return {}
    if not isinstance(found, dict):
        return {}
    return {key: found[key] for key in ("renderer", "parser")
            if isinstance(found.get(key), str) and found[key]}


def _text(library, layer: Layer) -> str:
    return (library.blobs / f"sha256-{layer.hex}").read_text(encoding="utf-8",
                                                             errors="replace")


def _read(library, layer: Layer, name: ModelName):
    """A small layer's value: text, or for params and messages the JSON they must be."""
    text, kind = _text(library, layer), str(layer.kind)
    if kind not in JSON_LAYERS:
        return text
    what = f"The {kind} layer {layer.digest[:19]} of {name.display}"
    value = loads(text, what)
    called, valid = JSON_LAYERS[kind]
    if not valid(value):
        raise Refused(f"{what} is not a JSON {called}; nothing was stored.")
    return value
