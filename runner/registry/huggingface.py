"""hf.co/USER/REPO[:QUANT]: a GGUF repository on Hugging Face, as Ollama takes the name.

The GGUF is the one whose name holds the quant tag (any case), else Q4_K_M's, else the first;
a file whose name holds "mmproj" is the repository's projector, pulled with it (an F16 one
preferred). huggingface_hub does the transfers (it honours HF_ENDPOINT, read here at each
pull, and the user's token), into a folder inside the store; each file then becomes a blob
under its sha256, so that list, show, cp and rm treat it as any pulled model.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from .names import DEFAULT_TAG, ModelName
from .transfer import PullError

DEFAULT_QUANT = "Q4_K_M"


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


def pull_hugging_face(name: ModelName, library, progress):
    """The model and projector into library's blobs, and its manifest; its Entry."""
    import huggingface_hub
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    endpoint = os.environ.get("HF_ENDPOINT") or None
    repo = name.repository
    progress({"status": "pulling manifest"})
    try:
        files = huggingface_hub.HfApi(endpoint=endpoint).list_repo_files(repo)
    except RepositoryNotFoundError:
        raise PullError(f"Hugging Face has no repository {repo} (or it is private and no "
                        "token was given: huggingface-cli login, or HF_TOKEN).", 404) from None
    except (HfHubHTTPError, OSError) as error:
        raise PullError(f"Could not list the files of {repo} on Hugging Face ({error}).") \
            from None
    try:
        model, projector = choose(files, name.tag)
    except PullError as error:
        raise PullError(f"{name.display}: {error}", error.status) from None
    scratch = library.scratch()
    try:
        fields = {}
        for key, filename in (("model", model), ("projector", projector)):
            if filename is None:
                continue
            status = f"pulling {Path(filename).name}"
            progress({"status": status})
            try:
                path = huggingface_hub.hf_hub_download(repo, filename, local_dir=scratch,
                                                       endpoint=endpoint)
            except (HfHubHTTPError, OSError) as error:
                raise PullError(f"Downloading {filename} from {repo} failed ({error}); "
                                "nothing was stored.") from None
            size = Path(path).stat().st_size
            progress({"status": status, "total": size, "completed": size})
            progress({"status": "verifying sha256 digest"})
            fields[key] = "sha256:" + library.add_blob(Path(path))
        progress({"status": "writing manifest"})
        entry = library.add_pulled(name.display, fields)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    progress({"status": "success"})
    return entry
