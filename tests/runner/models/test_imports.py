"""The model packages do not import themselves back: a model, encoder or audio module takes
what it registers with from contract.py and what encoders share from vision/pixels.py, never
a name of its own package's __init__ (which imports it to register it), so that importing a
package runs no module against a half-made package."""

from __future__ import annotations

import ast
from pathlib import Path

import runner.models

PACKAGE = Path(runner.models.__file__).parent


def own_package_names(path: Path) -> list[str]:
    """The names path imports from its own package (`from . import x`) that are not one of
    the package's modules."""
    siblings = {p.stem for p in path.parent.glob("*.py")} | \
        {p.name for p in path.parent.iterdir() if (p / "__init__.py").exists()}
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
            found += [alias.name for alias in node.names if alias.name not in siblings]
    return found


def test_no_model_module_imports_its_own_package_back():
    modules = [p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"]
    assert len(modules) > 20
    offending = {str(p.relative_to(PACKAGE)): names for p in modules
                 if (names := own_package_names(p))}
    assert not offending, offending


def test_the_registries_hold_every_family_and_encoder():
    import runner.models.audio  # noqa: F401  (registers its encoder)
    from runner.models import model_class
    from runner.models.contract import ARCHITECTURES, PROJECTORS
    from runner.models.qwen35 import Qwen35
    from runner.models.vision import projector_class

    assert model_class("qwen35") is Qwen35 and "llama" in ARCHITECTURES
    assert {"gemma3", "pixtral", "qwen3vl_merger", "gemma4a"} <= set(PROJECTORS)
    assert projector_class("gemma3") is PROJECTORS["gemma3"]
