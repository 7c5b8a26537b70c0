"""What sentence-transformers adds to an embedding model's checkpoint: the Pooling module's
mode, and Dense layers after it (EmbeddingGemma's 2_Dense and 3_Dense), written under
llama.cpp's names (dense_2, dense_3)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gguf

from .checkpoint import CheckpointError, _read_header, json_value, read_json

IDENTITY = "torch.nn.modules.linear.Identity"
DENSE_NAMES = {"2_Dense": "dense_2", "3_Dense": "dense_3"}      # llama.cpp's two


def _modules(directory) -> list[dict]:
    """modules.json's modules, each a type and a folder inside the checkpoint's."""
    path = directory / "modules.json"
    modules = json_value(path.read_bytes(), "modules.json") if path.exists() else []
    if not isinstance(modules, list):
        raise CheckpointError("modules.json holds no list of modules.")
    for module in modules:
        if not isinstance(module, dict) or not isinstance(module.get("type", ""), str) or \
                not _inside(module.get("path")):
            raise CheckpointError(f"modules.json lists {module!r}, not a module with a type "
                                  "and a folder inside the checkpoint's.")
    return modules


def _inside(folder) -> bool:
    return isinstance(folder, str) and not Path(folder).is_absolute() and \
        ".." not in Path(folder).parts


POOLING = {"pooling_mode_mean_tokens": gguf.PoolingType.MEAN,
           "pooling_mode_cls_token": gguf.PoolingType.CLS,
           "pooling_mode_lasttoken": gguf.PoolingType.LAST}


def pooling_of(directory, default: gguf.PoolingType | None = None) -> gguf.PoolingType | None:
    """The sentence-transformers Pooling module's mode (modules.json), else default: an
    embedding model of any architecture (Qwen3-Embedding: last token) says it there."""
    for module in _modules(directory):
        if module.get("type", "").endswith("Pooling"):
            config = read_json(directory / module["path"] / "config.json")
            for key, kind in POOLING.items():
                if config.get(key):
                    return kind
            raise CheckpointError("The sentence-transformers pooling mode is none of "
                                  "mean, cls or last token.")
    return default


def _dense_modules(directory: Path) -> list[tuple[str, dict, Path]]:
    """(GGUF name, Dense config, module folder) for each Dense module, in order."""
    found = []
    for module in _modules(directory):
        if not module.get("type", "").endswith("Dense"):
            continue
        if module["path"] not in DENSE_NAMES:
            raise CheckpointError(f"The Dense module in {module['path']} is not one of "
                                  f"{', '.join(DENSE_NAMES)}, the two llama.cpp reads.")
        folder = directory / module["path"]
        config = read_json(folder / "config.json")
        if config.get("activation_function", IDENTITY) != IDENTITY or config.get("bias"):
            raise CheckpointError(f"The Dense module in {module['path']} has an activation "
                                  "or a bias; llama.cpp's Dense layers are plain matrices.")
        found.append((DENSE_NAMES[module["path"]], config, folder))
    return found


def dense_sizes(directory) -> dict[str, tuple[int, int]]:
    """GGUF name -> (in, out) features of each Dense module."""
    return {name: (int(config["in_features"]), int(config["out_features"]))
            for name, config, _ in _dense_modules(directory)}


def add_dense_tensors(checkpoint) -> None:
    """The Dense modules' matrices into the checkpoint's tensors, under their GGUF names
    (dense_2.weight ...), in place."""
    for name, _, folder in _dense_modules(checkpoint.dir):
        entries = _read_header(folder / "model.safetensors")
        if "linear.weight" not in entries:
            raise CheckpointError(f"The checkpoint's {folder.name}/model.safetensors has no "
                                  "linear.weight.")
        checkpoint.tensors[f"{name}.weight"] = replace(entries["linear.weight"],
                                                       name=f"{name}.weight")
