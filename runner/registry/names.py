"""Model names as Ollama parses them (types/model/name.go): [SCHEME://][HOST/][NAMESPACE/]
MODEL[:TAG], the missing parts filled with registry.ollama.ai, library and latest.

A tag follows the last ':' only when that comes after the last '/' (so a host's port is not
taken for one). Each part is letters, digits, '_' and '-' after a letter, digit or '_',
at most 80 characters (a host 350); a model and tag may hold '.', a host ':' as well. The
shortest display drops the default host and namespace: `qwen3:8b`, `user/model:tag`,
`localhost:5000/user/model:tag`; the store keeps models under it.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"
HUGGING_FACE_HOSTS = ("hf.co", "huggingface.co")
LONGEST = {"host": 350}                 # else 80
DOTS = {"host", "model", "tag"}          # the parts that may hold '.'
COLONS = {"host"}


@dataclass(frozen=True)
class ModelName:
    host: str
    namespace: str
    model: str
    tag: str
    scheme: str = "https"

    @classmethod
    def parse(cls, text: str) -> "ModelName":
        """The name text says, defaults filled; ValueError naming the bad part."""
        rest, tag = str(text).strip(), ""
        if rest.rfind(":") > rest.rfind("/"):
            rest, tag = rest.rsplit(":", 1)
        parts = rest.split("/")
        if len(parts) > 3 and "://" not in rest:
            raise ValueError(f"{text!r} is not a model name: it has {len(parts)} parts "
                             "separated by '/', at most host/namespace/model.")
        model = parts.pop()
        namespace = parts.pop() if parts else DEFAULT_NAMESPACE
        host = "/".join(parts) or DEFAULT_HOST
        scheme = "https"
        if "://" in host:
            scheme, host = host.split("://", 1)
            if scheme not in ("http", "https"):
                raise ValueError(f"{text!r} names the scheme {scheme!r}; only http and https "
                                 "registries are known.")
        name = cls(host, namespace, model, tag or DEFAULT_TAG, scheme)
        for kind in ("host", "namespace", "model", "tag"):
            problem = _part_problem(kind, getattr(name, kind))
            if problem:
                raise ValueError(f"{text!r} is not a model name: its {kind} {problem}.")
        return name

    @property
    def display(self) -> str:
        """The shortest name that parses back to this one (as Ollama's DisplayShortest)."""
        if self.host.lower() != DEFAULT_HOST:
            prefix = f"{self.host}/{self.namespace}/"
        elif self.namespace.lower() != DEFAULT_NAMESPACE:
            prefix = f"{self.namespace}/"
        else:
            prefix = ""
        return f"{prefix}{self.model}:{self.tag}"

    @property
    def on_hugging_face(self) -> bool:
        return self.host.lower() in HUGGING_FACE_HOSTS

    @property
    def repository(self) -> str:
        """namespace/model, the path the registry serves it under."""
        return f"{self.namespace}/{self.model}"

    def url(self, *path: str) -> str:
        return f"{self.scheme}://{self.host}/" + "/".join(path)


def _part_problem(kind: str, part: str) -> str | None:
    """Why part is not a valid name part of its kind (None: it is)."""
    if not 1 <= len(part) <= LONGEST.get(kind, 80):
        return f"must be 1 to {LONGEST.get(kind, 80)} characters long"
    if not (part[0].isascii() and (part[0].isalnum() or part[0] == "_")):
        return f"{part!r} must start with a letter, digit or '_'"
    for char in part[1:]:
        allowed = (char.isascii() and char.isalnum()) or char in "_-" or \
            (char == "." and kind in DOTS) or (char == ":" and kind in COLONS)
        if not allowed:
            return f"{part!r} may not hold {char!r}"
    return None
