"""hf.co/USER/REPO[:QUANT]: a GGUF repository on Hugging Face, as Ollama takes the name.

The GGUF is the one whose name holds the quant tag (any case), else Q4_K_M's, else the first;
a file whose name holds "mmproj" is the repository's projector, pulled with it (an F16 one
preferred). The repository's files are listed through Hugging Face's tree API (HF_ENDPOINT,
read here at each pull, and the user's token), each page read within the bounds a manifest
has; each file is fetched as a registry's blob is (download.py: in parallel ranges,
resumable, verified against the sha256 Git LFS gives it) into the store's blobs, so that
list, show, cp and rm treat it as any pulled model.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote

import httpx

from .answers import check_status, read_bounded, read_head
from .errors import PullError, Refused
from .guard import Guard
from .limits import ERROR_MAX, MANIFEST_MAX, SIZE_MAX, Limits
from .manifest import DIGEST, loads
from .names import DEFAULT_TAG, ModelName
from .transfer import Remote

DEFAULT_QUANT = "Q4_K_M"
DEFAULT_ENDPOINT = "https://huggingface.co"
PAGES_MAX = 20                          # pages of a repository's file listing


def choose(files: list[str], tag: str) -> tuple[str, str | None]:
    """(the model GGUF, the projector GGUF or None) among a repository's files."""
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf"))
    projectors = [f for f in ggufs if "mmproj" in Path(f).name.lower()]
    models = [f for f in ggufs if f not in projectors]
    if not models:
        raise PullError("The repository has no GGUF model file.", 404)
    wanted = DEFAULT_QUANT if tag.lower() == DEFAULT_TAG else tag
    model = next((f for f in models if wanted.lower() in Path(f).name.lower()), None)
    if model is None and tag.lower() != DEFAULT_TAG:
        quants = ", ".join(Path(f).stem for f in models)
        raise PullError(f"The repository has no GGUF of the quantization {tag} (it has "
                        f"{quants}).", 404)
    projector = next((f for f in projectors if re.search(r"(?<!b)f16", f.lower())),
                     projectors[0] if projectors else None)
    return model or models[0], projector


def pull_hugging_face(name: ModelName, library, progress, limits: Limits, guard: Guard):
    """The model and projector into library's blobs, and its manifest; its Entry."""
    endpoint = (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    hub = Remote(httpx.URL(endpoint).host, limits, guard, _token())
    repo = name.repository
    try:
        progress({"status": "pulling manifest"})
        files = _listing(hub, endpoint, repo)
        try:
            model, projector = choose(list(files), name.tag)
        except PullError as error:
            raise PullError(f"{name.display}: {error}", error.status) from None
        chosen = [(key, filename) for key, filename in (("model", model),
                                                        ("projector", projector)) if filename]
        for _, filename in chosen:
            if files[filename][0] is None:
                raise Refused(f"{filename} in {repo} is not stored with Git LFS, so Hugging "
                              "Face gives no sha256 to check it by; nothing was stored.")
        fields = {}
        for key, filename in chosen:
            digest, size = files[filename]
            status = f"pulling {Path(filename).name}"

            def report(completed: int, status=status, size=size):
                progress({"status": status, "total": size, "completed": completed})

            hub.fetch(f"{endpoint}/{repo}/resolve/main/{quote(filename)}", str(digest), size,
                      library.blobs, report)
            fields[key] = digest
    finally:
        hub.close()
    progress({"status": "verifying sha256 digest"})          # each blob was, as it landed
    progress({"status": "writing manifest"})
    try:
        entry = library.add_pulled(name.display, fields)
    except ValueError as error:
        raise PullError(f"{name.display}'s GGUF is not one this runner reads ({error}); no "
                        "model was stored.") from None
    progress({"status": "success"})
    return entry


def _listing(hub: Remote, endpoint: str, repo: str) -> dict[str, tuple[str | None, int]]:
    """The repository's files: path -> ("sha256:<hex>" for files in Git LFS else None,
    size), from the tree API, a page at a time (each at most MANIFEST_MAX, PAGES_MAX of
    them), within answer_seconds."""
    seconds = hub.limits.answer_seconds
    url: str | None = f"{endpoint}/api/models/{repo}/tree/main?recursive=true"
    files: dict[str, tuple[str | None, int]] = {}
    with hub.guard.deadline(seconds, f"Hugging Face took more than {seconds:g} seconds to "
                                     f"list the files of {repo}; pull again later "
                                     "(RUNNER_PULL_TIMEOUT sets the bound)."):
        for _ in range(PAGES_MAX):
            if url is None:
                return files
            response = hub.request("GET", url)
            try:
                if response.status_code in (401, 403, 404):
                    raise PullError(f"Hugging Face has no repository {repo} (or it is private "
                                    "or gated and no token was given: huggingface-cli login, "
                                    "or HF_TOKEN).", 404)
                if response.status_code >= 400:
                    check_status(response.status_code, read_head(response, ERROR_MAX),
                                 f"the files of {repo}")
                page = loads(read_bounded(response, MANIFEST_MAX, f"A page of the files of "
                                                                  f"{repo}"),
                             f"A page of the files of {repo}")
                url = response.links.get("next", {}).get("url")
            finally:
                response.close()
            if not isinstance(page, list):
                raise Refused(f"Hugging Face's list of the files of {repo} is not a list.")
            files.update(_file(entry) for entry in page if isinstance(entry, dict) and
                         entry.get("type") == "file" and isinstance(entry.get("path"), str))
    if url is not None:
        raise Refused(f"{repo} has more than {PAGES_MAX} pages of files; it was refused.")
    return files


def _file(entry: dict) -> tuple[str, tuple[str | None, int]]:
    found = entry.get("lfs")
    lfs: dict = found if isinstance(found, dict) else {}
    oid, size = lfs.get("oid"), lfs.get("size", entry.get("size"))
    digest = f"sha256:{oid}" if isinstance(oid, str) and DIGEST.fullmatch(f"sha256:{oid}") \
        else None
    if type(size) is not int or not 0 <= size <= SIZE_MAX:
        raise Refused(f"Hugging Face gives {entry['path']} the size {size!r}, which is not a "
                      "size; it was refused.")
    return entry["path"], (digest, size)


def _token() -> str | None:
    """The user's Hugging Face token (HF_TOKEN, or huggingface-cli login's), if any."""
    try:
        from huggingface_hub import get_token
    except ImportError:
        return os.environ.get("HF_TOKEN") or None
    return get_token()
