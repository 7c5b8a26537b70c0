"""The models a server offers: what `pull` put in the store, models made with /api/create or
/api/copy (a manifest naming a GGUF blob or file, with an optional template, system prompt
and parameters), and GGUF paths given as names.

Store layout under $RUNNER_MODELS: the catalog's files as `pull` writes them, `blobs/
sha256-<hex>` (uploaded GGUF files), `manifests/<name>/<tag>.json`. Files are written to a
temporary name and renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

from ...loading import store
from ...registry.names import ModelName
from .catalog import catalog_entry
from .entry import Entry, header_of

DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")
LONGEST_NAME = 256


class ModelNotFound(LookupError):
    pass


def _read_manifest(path: Path, name: str) -> dict:
    """A manifest this store wrote, or a ValueError saying it is malformed (a file edited
    or cut short by hand): its model a digest or a path, its other fields as written."""
    try:
        manifest = json.loads(path.read_text())
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ValueError(f'the manifest of model "{name}" is not JSON ({error}); remove it '
                         "with /api/delete") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("model"), str) or \
            not isinstance(manifest.get("projector") or "", str) or \
            not isinstance(manifest.get("parameters") or {}, dict):
        raise ValueError(f'the manifest of model "{name}" is malformed (it names no model '
                         "file, or a field has the wrong type); remove it with /api/delete")
    return manifest


def normalize(name: str) -> str:
    """'foo' -> 'foo:latest', 'registry.ollama.ai/library/foo' -> 'foo:latest' (Ollama's
    shortest display, registry/names.py); names are matched without regard to case."""
    name = str(name).strip()
    if len(name) > LONGEST_NAME:
        raise ValueError(f"{name!r} is not a model name (at most {LONGEST_NAME} characters).")
    try:
        return ModelName.parse(name).display.lower()
    except ValueError:
        raise ValueError(f"{name!r} is not a model name ([host/][namespace/]model[:tag], "
                         "letters, digits, '.', '_' and '-').") from None


class Upload:
    """An uploaded file on its way into the store; nothing is kept unless commit() succeeds."""

    def __init__(self, blobs: Path, digest: str):
        self.target = blobs / f"sha256-{digest}"
        self.digest, self.hasher = digest, hashlib.sha256()
        self.file = tempfile.NamedTemporaryFile(dir=blobs, prefix=".upload-", delete=False)

    def write(self, chunk: bytes) -> None:
        self.hasher.update(chunk)
        self.file.write(chunk)

    def commit(self) -> None:
        self.file.close()
        if self.hasher.hexdigest() != self.digest:
            self.discard()
            raise ValueError(f"digest mismatch: the data's sha256 is {self.hasher.hexdigest()}")
        os.replace(self.file.name, self.target)

    def discard(self) -> None:
        self.file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.file.name)


class Library:
    def __init__(self, root: Path | None = None):
        self.root = Path(root or store.store_dir()).absolute()
        self.blobs, self.manifests = self.root / "blobs", self.root / "manifests"
        self._lock = threading.Lock()
        self._digests: dict[Path, tuple[float, str]] = {}

    # -- reading ------------------------------------------------------------------------

    def get(self, name: str) -> Entry:
        """The model a request names: a catalog or created model, or a GGUF path."""
        text = str(name).strip()
        if text in store.CATALOG or text.lower() in store.CATALOG:
            key = text.lower()
            path = store.path_of(key)
            if path.exists():
                return catalog_entry(key, path, store.CATALOG[key].sha256)
            raise ModelNotFound(f'model "{text}" not found, try pulling it first')
        given = store.user_path(text)
        if text.endswith(".gguf") and given is not None and given.is_file():
            return Entry(text, given, self._digest(given))
        try:
            key = normalize(text)
        except ValueError:
            raise ModelNotFound(f'model "{text}" not found, try pulling it first') from None
        manifest = self._manifest_path(key)
        if not manifest.is_file():
            raise ModelNotFound(f'model "{text}" not found, try pulling it first')
        return self._entry(key, _read_manifest(manifest, key))

    def _entry(self, name: str, manifest: dict) -> Entry:
        source = manifest["model"]
        found = DIGEST.match(source)
        path = self.blobs / f"sha256-{found.group(1)}" if found else Path(source)
        if not path.is_file():
            raise ModelNotFound(f'model "{name}" not found: its file {path} is gone')
        digest = found.group(1) if found else manifest.get("digest") or self._digest(path)
        projector = self._source_path(manifest["projector"]) if manifest.get("projector") \
            else None
        if projector is not None and not projector.is_file():
            raise ModelNotFound(f'model "{name}" not found: its projector {projector} is gone')
        return Entry(name, path, digest, manifest.get("template"), manifest.get("system"),
                     manifest.get("parameters") or {}, projector, manifest.get("messages"),
                     manifest.get("license"), manifest.get("go_template"),
                     renderer=manifest.get("renderer"), parser=manifest.get("parser"),
                     manifest_digest=hashlib.sha256(json.dumps(
                         manifest, sort_keys=True).encode()).hexdigest())

    def _source_path(self, source: str) -> Path:
        found = DIGEST.match(source)
        return self.blobs / f"sha256-{found.group(1)}" if found else Path(source)

    def list(self) -> list[Entry]:
        found = [catalog_entry(name, store.path_of(name), source.sha256)
                 for name, source in store.CATALOG.items() if store.path_of(name).exists()]
        for manifest in sorted(self.manifests.rglob("*.json")) if self.manifests.exists() else []:
            relative = manifest.relative_to(self.manifests)
            name = f"{'/'.join(relative.parts[:-1])}:{relative.stem}"
            try:
                found.append(self._entry(name, _read_manifest(manifest, name)))
            except (ModelNotFound, ValueError):
                continue
        return found

    def _digest(self, path: Path) -> str:
        stamp = path.stat().st_mtime
        cached = self._digests.get(path)
        if cached is None or cached[0] != stamp:
            cached = (stamp, store.sha256_of(path))
            self._digests[path] = cached
        return cached[1]

    def _manifest_path(self, name: str) -> Path:
        """manifests/<namespace>/<model>/<tag>.json of a normalized name, inside the store."""
        model, tag = name.rsplit(":", 1)
        path = self.manifests.joinpath(*model.split("/"), f"{tag}.json")
        if not path.resolve().is_relative_to(self.manifests.resolve()):
            raise ValueError(f"{name!r} is not a model name.")
        return path

    # -- writing ------------------------------------------------------------------------

    def has_blob(self, digest: str) -> bool:
        return (self.blobs / f"sha256-{digest}").is_file()

    def is_projector(self, digest: str) -> bool:
        """Whether the blob is an mmproj file (a vision encoder), not a model."""
        meta = header_of(self.blobs / f"sha256-{digest}").metadata
        return meta.get("general.architecture") == "clip"

    def add_blob(self, path: Path) -> str:
        """Move a file this server made (a conversion, a quantization) into the store as a
        blob; its digest."""
        self.blobs.mkdir(parents=True, exist_ok=True)
        digest = store.sha256_of(path)
        os.replace(path, self.blobs / f"sha256-{digest}")
        return digest

    def scratch(self) -> Path:
        """A fresh directory inside the store (on its disk) for work in progress."""
        self.root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=self.root, prefix=".work-"))

    def upload(self, digest: str) -> Upload:
        """A blob being uploaded: written to a temporary file as it arrives, kept under its
        sha256 only if the data has that digest."""
        self.blobs.mkdir(parents=True, exist_ok=True)
        return Upload(self.blobs, digest)

    def create(self, name: str, source: str | Path, template: str | None = None,
               system: str | None = None, parameters: dict | None = None,
               projector: str | Path | None = None, messages: builtins.list | None = None,
               license: str | None = None) -> Entry:
        """A model named name over source: a blob digest, a file, or another model's file;
        projector likewise, the vision encoder's mmproj."""
        key = normalize(name)
        manifest: dict[str, Any] = {
            "model": self._source(source), "template": template, "system": system,
            "parameters": parameters or {}, "messages": messages, "license": license}
        if projector is not None:
            manifest["projector"] = self._source(projector)
            meta = header_of(self._source_path(manifest["projector"])).metadata
            if meta.get("general.architecture") != "clip":
                raise ValueError("the projector is not an mmproj file (general.architecture "
                                 "clip)")
        self._write_manifest(key, manifest)
        return self.get(key)

    def _source(self, source: str | Path) -> str:
        """A blob digest or a file's absolute path, refused unless it is a GGUF file."""
        found = DIGEST.match(str(source))
        if found and not self.has_blob(found.group(1)):
            raise ModelNotFound(f"blob sha256:{found.group(1)} not found; upload it first")
        path = self.blobs / f"sha256-{found.group(1)}" if found else Path(source).resolve()
        header_of(path)                                    # a GGUF, or a ValueError
        return f"sha256:{found.group(1)}" if found else str(path)

    def add_pulled(self, name: str, fields: dict) -> Entry:
        """A pulled model: fields "model" (and "projector") blob digests already in the
        store, and what its manifest brought (go_template, system, parameters, messages,
        license, and the config's renderer and parser)."""
        key = normalize(name)
        for part in ("model", "projector"):
            if part in fields:
                self._source(fields[part])                 # in the store, and a GGUF
        self._write_manifest(key, {"parameters": {}, **fields})
        return self.get(key)

    def copy(self, source: str, destination: str) -> None:
        """A new name for source's model; refused (ValueError) unless its files are GGUF
        files this server reads, so that no name is made for a model nothing can load."""
        entry = self.get(source)
        try:
            for path in (entry.path, entry.projector):
                if path is not None:
                    header_of(path)
        except (OSError, ValueError) as error:
            raise ValueError(f'model "{source}" cannot be copied: its file is not a GGUF '
                             f"file this server reads ({error}).") from None
        model = f"sha256:{entry.digest}" if entry.path.parent == self.blobs else str(entry.path)
        manifest = {"model": model, "digest": entry.digest, "template": entry.template,
                    "system": entry.system, "parameters": entry.parameters,
                    "messages": entry.messages, "license": entry.license,
                    "go_template": entry.go_template}
        manifest.update({k: v for k, v in (("renderer", entry.renderer),
                                           ("parser", entry.parser)) if v})
        if entry.projector is not None:
            manifest["projector"] = str(entry.projector)
        self._write_manifest(normalize(destination), manifest)

    def delete(self, name: str) -> str:
        """Remove a pulled model's file, or a created model's manifest and the blobs no other
        manifest names; the name deleted. A manifest is removed whatever it holds (JSON
        that does not parse, a file gone or not a GGUF): nothing in the store is left that
        delete refuses. A GGUF path given as a name is never deleted: it is not in the
        store."""
        if str(name).strip().lower() in store.CATALOG:
            entry = self.get(name)
            with self._lock:
                entry.path.unlink()
            return entry.name
        try:
            key = normalize(name)
            manifest = self._manifest_path(key)
        except ValueError:
            raise ValueError(f"{name!r} is not a model in the store (a file path is never "
                             "deleted); nothing was deleted.") from None
        if not manifest.is_file():
            raise ModelNotFound(f'model "{name}" not found')
        with self._lock:
            named = self._blobs_named(manifest)
            manifest.unlink()
            for folder in manifest.parents:
                if folder == self.manifests or not folder.is_relative_to(self.manifests) or \
                        any(folder.iterdir()):
                    break
                folder.rmdir()
            kept = {blob for other in self.manifests.rglob("*.json")
                    for blob in self._blobs_named(other)}
            for blob in named - kept:
                blob.unlink(missing_ok=True)
        return key

    def _blobs_named(self, manifest: Path) -> set[Path]:
        """The store's blobs a manifest names (its model and projector); none where it
        cannot be read."""
        try:
            fields = json.loads(manifest.read_text())
        except (OSError, ValueError, RecursionError):
            return set()
        sources = [fields.get(part) for part in ("model", "projector")] \
            if isinstance(fields, dict) else []
        paths = {self._source_path(source) for source in sources if isinstance(source, str)}
        return {path for path in paths if path.parent == self.blobs}

    def _write_manifest(self, name: str, manifest: dict) -> None:
        path = self._manifest_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False,
                                         suffix=".tmp") as f:
            json.dump(manifest, f)
        os.replace(f.name, path)

