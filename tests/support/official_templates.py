"""References read from the pinned source archive that the build already fetches through pip
(vendor/ggml/pin.json), never committed here: chat templates as their models publish them
(llama.cpp's copies in `models/templates/`), llama.cpp's chat template test cases (templates of
older models with the prompts they render to), and llama.cpp's server tests."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
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


# a field of a test case in llama.cpp's tests/test-chat-template.cpp: /* .name= */ "text"
# (or U8C("text"), u8"text"), its C escapes undone by CPP_ESCAPES
CASE_FIELD = re.compile(r'/\* \.(\w+)= \*/\s*(?:U8C\()?(?:u8)?"((?:[^"\\]|\\.)*)"')
CPP_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'"}


@functools.cache
def llama_cpp_chat_cases() -> dict[str, dict[str, str]]:
    """llama.cpp's own chat template test cases by name (tests/test-chat-template.cpp):
    template_str, expected_output, expected_output_jinja (its Jinja engine's, where it
    differs), bos_token and eos_token (empty where the case gives none); each renders the
    same six-message conversation (CHAT_CASE_CONVERSATION) with a generation prompt."""
    archive, llama_cpp = pinned_archive()
    with tarfile.open(archive) as tar:
        member = tar.extractfile(f"{llama_cpp}/tests/test-chat-template.cpp")
        assert member is not None
        source = member.read().decode()
    body = source[source.index("std::vector<TestCase> test_cases {"):]
    cases: dict[str, dict[str, str]] = {}
    case: dict[str, str] = {}
    for found in CASE_FIELD.finditer(body[:body.index("\n    };\n")]):
        key, raw = found.groups()
        value = re.sub(r"\\(.)", lambda escape: CPP_ESCAPES[escape.group(1)], raw)
        if key == "name":
            case = cases[value] = {"bos_token": "", "eos_token": ""}
        case[key] = value
    return cases


CHAT_CASE_CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant"},
    {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"},
    {"role": "user", "content": "Who are you"},
    {"role": "assistant", "content": "   I am an assistant   "},
    {"role": "user", "content": "Another question"}]
