"""`pull NAME`: a model from Ollama's registry (or another that speaks its API) or from
Hugging Face, into the store as a model the server lists, shows, runs, copies and deletes.

From a registry (server/images.go's PullModel): the manifest, then each layer's blob by
digest (transfer.py: parallel, resumable, verified); the small layers are read into the
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

import json
from typing import Callable

from .names import ModelName
from .transfer import PullError, Registry

MEDIA = "application/vnd.ollama.image."
# a layer's media type -> what the store's manifest keeps of it
LAYERS = {"model": "model", "projector": "projector", "template": "go_template",
          "prompt": "go_template", "system": "system", "params": "parameters",
          "messages": "messages", "license": "license"}
SMALL = 1 << 20                         # text layers larger than this are not read
Progress = Callable[[dict], None]


def pull(text: str, library, insecure: bool = False, progress: Progress = lambda _: None):
    """Pull the model text names into library; its Entry. PullError (one sentence) when it
    cannot be: nothing half-written is left where a model is looked up."""
    try:
        name = ModelName.parse(text)
    except ValueError as error:
        raise PullError(str(error), 400) from None
    if name.on_hugging_face:
        from .huggingface import pull_hugging_face

        return pull_hugging_face(name, library, progress)
    registry = Registry(name, insecure)
    try:
        progress({"status": "pulling manifest"})
        manifest = registry.manifest()
        kinds = [_kind(layer) for layer in manifest["layers"]]
        if "adapter" in kinds:
            raise PullError(f"{name.display} has a LoRA adapter layer, which this runner does "
                            "not apply; nothing was stored.", 400)
        if kinds.count("model") != 1:
            raise PullError(f"{name.display}'s manifest has {kinds.count('model')} model "
                            "layers, not one; nothing was stored.")
        for layer in manifest["layers"]:
            status = f"pulling {layer['digest'][7:19]}"

            def report(completed: int, layer=layer, status=status):
                progress({"status": status, "digest": layer["digest"], "total": layer["size"],
                          "completed": completed})

            registry.fetch(layer["digest"], layer["size"], library.blobs, report)
    finally:
        registry.close()
    progress({"status": "verifying sha256 digest"})          # each blob was, as it landed
    fields = _config(library, manifest)
    for layer, kind in zip(manifest["layers"], kinds):
        if kind in ("model", "projector"):
            fields[LAYERS[kind]] = layer["digest"]
        elif kind in LAYERS and layer["size"] <= SMALL:
            fields[LAYERS[kind]] = _read(library, layer["digest"], kind)
    progress({"status": "writing manifest"})
    try:
        entry = library.add_pulled(name.display, fields)
    except ValueError as error:
        raise PullError(f"{name.display}'s model layer is not a GGUF file this runner reads "
                        f"({error}); no model was stored.") from None
    progress({"status": "success"})
    return entry


def _kind(layer: dict) -> str | None:
    media = str(layer.get("mediaType", ""))
    return media[len(MEDIA):] if media.startswith(MEDIA) else None


def _config(library, manifest: dict) -> dict:
    """The config blob's "renderer" and "parser" (types/model/config.go's ConfigV2), where
    it names them; a config that is not a JSON object names none (Ollama's older manifests
    and other registries' carry other things there)."""
    config = manifest.get("config") or {}
    digest, size = config.get("digest"), int(config.get("size") or 0)
    if not digest or size > SMALL or not (library.blobs / f"sha256-{digest[7:]}").is_file():
        return {}
    try:
        found = json.loads(_read(library, digest, "config"))
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {key: found[key] for key in ("renderer", "parser")
            if isinstance(found.get(key), str) and found[key]}


def _read(library, digest: str, kind: str):
    text = (library.blobs / f"sha256-{digest[7:]}").read_text(encoding="utf-8",
                                                              errors="replace")
    if kind in ("params", "messages"):
        try:
            return json.loads(text)
        except ValueError:
            raise PullError(f"The {kind} layer {digest[:19]} is not JSON; nothing was "
                            "stored.") from None
    return text
